"""HotpotQA with each rewriter kind: ``prf`` always (it needs no model), the chat-model kinds
when an offline chat model is reachable.

The offline LLM is SmolLM2-135M-Instruct served by ``llama-cpp-python``'s OpenAI-compatible
server (``bench/offline_llm.py``). The harness starts it itself when ``llama_cpp`` is importable,
or uses ``--llm URL`` (any OpenAI-compatible endpoint). A 135M model on a shared 2-core CPU takes
seconds per rewrite, so only the first ``limit`` report questions are used, and the fused
graph without a rewriter and with ``prf`` are scored on the same questions beside them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from parallel_rag.graph.builder import build_graph
from parallel_rag.studio.evaluation import ranked_doc_ids, run_graph

MODEL_FREE_KINDS = ("prf",)
LLM_KINDS = ("multi_query", "decompose", "hyde")


def _runs_and_failures(graph, queries: dict[str, str], depth: int, batch_size: int = 2):
    """Fused runs, and how many questions fell back to the original query alone because the
    rewriter failed (``on_failure: warn`` records it in ``warnings``)."""
    runs: dict[str, list[str]] = {}
    failed = 0
    qids = list(queries)
    for start in range(0, len(qids), batch_size):
        chunk = qids[start : start + batch_size]
        results = graph.batch([{"query": queries[q], "top_k": depth} for q in chunk])
        for qid, result in zip(chunk, results, strict=True):
            runs[qid] = ranked_doc_ids(result["documents"])
            failed += any("rewrite" in w.lower() for w in result.get("warnings", []))
    return runs, failed


def rewriter_rows(
    *,
    config,
    work: Path,
    report_set: list[dict],
    corpus,
    metrics,
    log,
    base_url: str | None,
    model: str = "smollm2",
    limit: int = 40,
    depth: int = 100,
) -> list[dict[str, Any]]:
    subset = report_set[:limit]
    queries = {q["_id"]: q["question"] for q in subset}
    rows = []
    base = config.model_dump(exclude_unset=True)
    no_rewrite = metrics(
        run_graph(build_graph(base, base_dir=work), queries, depth), subset, corpus
    )
    rows.append(
        {
            "config": f"fused graph, no rewriter (first {len(subset)} report questions)",
            "kind": "fused",
            **no_rewrite,
        }
    )
    # prf with its own defaults (fb_docs, fb_terms); the chat-model kinds when one is served
    variants = [
        ({"kind": kind}, f"fused graph + {kind} rewriter (no model, same questions)")
        for kind in MODEL_FREE_KINDS
    ]
    if base_url is not None:
        llm = {
            "model": model,
            "base_url": base_url,
            "temperature": 0,
            "max_tokens": 200,
            "timeout_seconds": 120,
        }
        variants += [
            (
                {"kind": kind, "num_queries": 3, "llm": llm},
                f"fused graph + {kind} rewriter (SmolLM2-135M, same questions)",
            )
            for kind in LLM_KINDS
        ]
    for rewriter, label in variants:
        started = time.perf_counter()
        graph = build_graph({**base, "rewriter": rewriter}, base_dir=work)
        runs, failed = _runs_and_failures(graph, queries, depth)
        seconds = time.perf_counter() - started
        row = {
            "rewrite_failed": failed / max(len(queries), 1),
            "config": label,
            "kind": "rewriter",
            "seconds": seconds,
            **metrics(runs, subset, corpus),
        }
        rows.append(row)
        found = row["AllSupport@10"]
        log(f"[rewrite] {rewriter['kind']}: AllSupport@10={found:.3f} in {seconds:.0f}s")
    return rows
