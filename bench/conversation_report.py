"""The tables of ``bench/conversations.py``: follow-up and switch recall@10 per split with
the ratios issue 49 asks for, the dev set's own check (does the written-out question find the
target more often than the last turn alone?), the time resolution adds per turn and checkpoint
bytes per turn, rendered as the Markdown of ``bench/CONVERSATION-RESULTS.md``."""

from __future__ import annotations

import os
import time
from typing import Any

from bench.conversations import SPLITS, K, last_turn, median

FOLLOW_ROWS = (
    ("last", "last turn alone, `{query: last}`"),
    ("conversation", "conversation, `{messages}` (LLM-free default)"),
    ("thread", "thread, earlier turns answered by the graph"),
    ("llm", "conversation, SmolLM2 writes the question"),
    ("written", "written out by hand, `{query: written_out}`"),
)
SWITCH_ROWS = (
    ("written", "self-contained question alone"),
    ("conversation", "after the unrelated turns, `{messages}` (LLM-free)"),
    ("thread", "after the unrelated turns, thread"),
    ("llm", "after the unrelated turns, SmolLM2"),
)


def mean_of(records: list[dict], row: str) -> float | None:
    values = [r[row] for r in records if row in r]
    return sum(values) / len(values) if values and len(values) == len(records) else None


def _groups(records: list[dict]) -> list[tuple[str, list[dict]]]:
    groups = [(s, [r for r in records if r["split"] == s]) for s in SPLITS]
    return [(f"{name} ({len(rs)})", rs) for name, rs in groups + [("all", records)] if rs]


def recall_table(records: list[dict], rows, derived) -> str:
    from bench.tables import cell, markdown_table

    groups = _groups(records)
    body = [[label] + [cell(mean_of(rs, row)) for _, rs in groups] for row, label in rows]
    for label, numerator, denominator, op in derived:
        line = [label]
        for _, rs in groups:
            a, b = mean_of(rs, numerator), mean_of(rs, denominator)
            ok = a is not None and b is not None and (op == "-" or b > 0)
            line.append(cell((a - b if op == "-" else a / b) if ok else None))
        body.append(line)
    return markdown_table([f"recall@{K}"] + [name for name, _ in groups], body)


def check_table(records: list[dict]) -> str:
    from bench.tables import markdown_table

    counts = {"written out finds it, last turn alone misses": 0, "both find it": 0,
              "both miss": 0, "last turn alone finds it, written out misses": 0}  # fmt: skip
    keys = list(counts)
    for r in records:
        w, a = r["written"] > 0, r["last"] > 0
        counts[keys[0 if w and not a else 1 if w else 3 if a else 2]] += 1
    return markdown_table(["follow-ups", "count"], [[k, v] for k, v in counts.items()])


def latency_table(report: dict[str, Any]) -> str:
    from bench.tables import cell, markdown_table

    follow = [r for r in report["records"].values() if r["kind"] == "follow_up"]
    if not follow or "conversation_ms" not in follow[0]:
        return "(the graph does not take `messages`: nothing to time)"

    def row(label, wall, cpu, digits=1):
        return [label, cell(median(wall), digits), cell(median(cpu), digits)]

    rows = [
        row("follow-up as `{query: last}` (no resolution)", [r["last_ms"] for r in follow],
            [r["last_cpu_ms"] for r in follow]),
        row("follow-up as `{messages}` (resolution + the follow_up view)",
            [r["conversation_ms"] for r in follow], [r["conversation_cpu_ms"] for r in follow]),
        row("added per follow-up (median of the paired differences)",
            [r["conversation_ms"] - r["last_ms"] for r in follow],
            [r["conversation_cpu_ms"] - r["last_cpu_ms"] for r in follow]),
    ]  # fmt: skip
    step = report["resolution_step"]
    rows.append(["resolution step alone (`resolve_conversation`), µs", cell(step["wall_us"], 0),
                 cell(step["cpu_us"], 0)])  # fmt: skip
    first = report["first_turn"]
    rows += [
        row("first turn as `{query}`", first["query_ms"], first["query_cpu"]),
        row("first turn as `{messages}`", first["messages_ms"], first["messages_cpu"]),
        row("added on a first turn (median of the paired differences)",
            [m - q for m, q in zip(first["messages_ms"], first["query_ms"], strict=True)],
            [m - q for m, q in zip(first["messages_cpu"], first["query_cpu"], strict=True)]),
    ]  # fmt: skip
    rows.append([f"first turn: same ranking as `{{query}}` in {first['same']} of {first['n']}",
                 "", ""])  # fmt: skip
    if report.get("llm"):
        rows.append(
            row(
                "follow-up with SmolLM2 (CPU: this process)",
                [r["llm_ms"] for r in follow],
                [r["llm_cpu_ms"] for r in follow],
            )
        )
        rows.append(["… and the llama.cpp server's CPU, ms", "",
                     cell(median([r["llm_server_cpu_ms"] for r in follow]), 0)])  # fmt: skip
    return markdown_table(["per turn, median", "wall ms", "CPU ms"], rows)


def checkpoint_table(report: dict[str, Any]) -> str:
    from bench.tables import markdown_table

    runs = report.get("checkpoints")
    if not runs:
        return "(no checkpointer run)"
    headers, rows = ["turn"], []
    for name in runs:
        headers += [f"newest checkpoint, {name}", f"file grew by, {name}"]
    for index in range(len(next(iter(runs.values())))):
        line = [str(index + 1)]
        for turns in runs.values():
            line += [f"{turns[index]['newest']:,}", f"{turns[index]['added']:,}"]
        rows.append(line)
    return markdown_table(headers, rows)


def misses(records: list[dict], conversations: dict[str, dict]) -> str:
    """Train follow-ups the written-out question finds and the conversation does not (test
    ones only counted: tuning reads train)."""
    lines = []
    for r in records:
        if r["kind"] != "follow_up" or r["written"] == 0 or r.get("conversation", 1) > 0:
            continue
        if r["split"] == "train":
            c = conversations[r["id"]]
            lines.append(f"- {r['id']}: {last_turn(c)!r} -> retrieved on {r['retrieved_on']!r}")
    return "\n".join(lines) or "- none"


def render(report: dict[str, Any], conversations: list[dict], command: str, seconds: float) -> str:
    records = list(report["records"].values())
    follow = [r for r in records if r["kind"] == "follow_up"]
    switch = [r for r in records if r["kind"] == "switch"]
    derived = (("conversation ÷ written out", "conversation", "written", "/"),
               ("conversation − last turn alone", "conversation", "last", "-"),
               ("thread − last turn alone", "thread", "last", "-"),
               ("SmolLM2 ÷ written out", "llm", "written", "/"))  # fmt: skip
    switch_derived = (("after unrelated turns ÷ alone (LLM-free)", "conversation", "written", "/"),
                      ("thread ÷ alone", "thread", "written", "/"),
                      ("SmolLM2 ÷ alone", "llm", "written", "/"))  # fmt: skip
    by_id = {c["id"]: c for c in conversations}
    parts = [
        f"`{command}` · {time.strftime('%Y-%m-%d')} · {seconds:.0f} s wall · "
        f"load {os.getloadavg()[1]:.1f} · embedded defaults (BM25 + Qdrant Edge), no reranker",
        f"### Follow-ups: target recall@{K}\n\n" + recall_table(follow, FOLLOW_ROWS, derived),
        "### Switches and greetings: the self-contained question keeps its recall\n\n"
        + recall_table(switch, SWITCH_ROWS, switch_derived),
        "### The set's check: does the follow-up depend on the earlier turn?\n\n"
        + check_table(follow),
        "### Time resolution adds per turn\n\n" + latency_table(report),
        "### Checkpoint bytes per turn (5-turn thread, `SqliteSaver`)\n\n"
        + checkpoint_table(report),
        "### Train follow-ups the written-out question finds and the conversation misses\n\n"
        + misses(records, by_id),
    ]
    return "\n\n".join(parts) + "\n"


RESULTS_HEADER = """# Conversations: does a follow-up find what it needs? (issue 49)

Target recall@10 on the hand-written conversational dev set `bench/conversation_set.jsonl`
(HotpotQA dev500 bridge questions; tune on `train`, report `test`), from
`python -m bench.conversations`; how the set was written is in that module's docstring.

"""
