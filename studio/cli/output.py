"""How ``ask`` and ``chat`` show a run: each branch as it finishes (stderr), then the answer
with its cited sources, or the whole result as JSON."""

from __future__ import annotations

import argparse
import json
import sys


def format_answer(result: dict) -> str:
    """Human-readable answer: text, the cited sources (with page, slide or section: ``manual.pdf
    p. 6``), and which branches found them."""
    from parallel_rag.nodes.generate.citations import source_label

    lines = [result["answer"], ""]
    resolution = result.get("resolution") or {}
    if resolution.get("retrieved_on") not in (None, resolution.get("question")):
        lines.append(f"(retrieved on: {resolution['retrieved_on']})")
    cited = {c["number"] for c in result["citations"]}
    if result["documents"]:
        lines.append("Sources:")
    for number, doc in enumerate(result["documents"], start=1):
        marker = "*" if number in cited else " "
        found_by = ", ".join(
            f"{s['retriever']} #{s['rank']}"
            + ("" if s["view_kind"] == "original" else f" ({s['view_kind']})")
            for s in doc["sources"]
        )
        source = source_label(doc)
        lines.append(
            f" {marker}[{number}] {source}  (fused {doc['fused_score']:.4f}; found by {found_by})"
        )
    failed = [b for b in result["branches"] if b["status"] == "failed"]
    for branch in failed:
        lines.append(f"branch {branch['branch']} failed: {branch['error']}")
    for warning in result["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def format_progress(event: dict) -> str:
    """One line per finished branch, as the retrieve node reports it on the custom stream."""
    line = (
        f"  {event['branch']} ({event['view_kind']}): {event['status']}, {event['hits']} hit(s), "
        f"{event['latency_ms']:.0f} ms"
    )
    return line + (f" - {event['error']}" if event.get("error") else "")


def run_with_progress(
    graph, request: dict, *, show: bool = True, out=None, config: dict | None = None
) -> dict:
    """Run the graph, printing each branch to ``out`` (stderr) the moment it finishes; returns
    what ``invoke`` would (the streamed state cut to the output schema's keys). ``config``
    names a thread (``thread_config``) when the graph has a checkpointer."""
    out = out or sys.stderr
    state: dict = {}
    # a thread keeps each turn's final state only (not every step's): a few tens of kB a turn
    durability = "exit" if config else None
    for mode, chunk in graph.stream(
        request, config, stream_mode=["custom", "values"], durability=durability
    ):
        if mode == "values":
            state = chunk
        elif show and isinstance(chunk, dict) and chunk.get("event") == "branch_finished":
            print(format_progress(chunk), file=out, flush=True)
    return {key: state[key] for key in graph.output_channels if key in state}


def print_result(args: argparse.Namespace, result: dict) -> None:
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False, default=json_default))
    else:
        print(format_answer(result))


def json_default(value):
    from langchain_core.messages import BaseMessage

    if isinstance(value, BaseMessage):  # the conversation, as the OpenAI API writes turns
        role = {"human": "user", "ai": "assistant"}.get(value.type, value.type)
        return {"role": role, "content": value.text}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
