"""Scale: BM25 (both engines) on a synthetic corpus, the embedded vector stores on random unit
vectors, and ingestion against the embedding model's raw encode rate. Each measurement runs
in its own process (``bench/worker.py``) so its peak memory is its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.measure import run_worker

SLOW_ENGINE_QUERIES = 20  # rank-bm25 scores every document in Python: ~1 s a query at 100k


def bm25_scale(sizes, engines=("bm25s", "rank_bm25"), queries=100, timeout=1200, log=print):
    rows: list[dict[str, Any]] = []
    for size in sizes:
        for engine in engines:
            n_queries = queries if engine == "bm25s" or size <= 10_000 else SLOW_ENGINE_QUERIES
            log(f"[scale] bm25 {engine} at {size:,} docs ({n_queries} queries) ...")
            result = run_worker(
                "bm25",
                {"docs": size, "engine": engine, "queries": n_queries},
                timeout=timeout,
                log=log,
            )
            result.setdefault("docs", size)
            result.setdefault("engine", engine)
            rows.append(result)
            if "error" not in result:
                log(
                    f"[scale] bm25 {engine} {size:,}: build {result['build_s']:.1f}s, "
                    f"+{result['index_mb']:.0f} MB (peak {result['peak_rss_mb']:.0f} MB), "
                    f"p50 {result['query_ms']['p50']:.2f} ms p95 {result['query_ms']['p95']:.2f} ms"
                )
    return rows


def store_scale(
    sizes, work: Path, stores=("qdrant", "milvus"), queries=100, timeout=1800, log=print
):
    rows: list[dict[str, Any]] = []
    for size in sizes:
        for store in stores:
            log(f"[scale] {store} at {size:,} random unit vectors ...")
            result = run_worker(
                "store",
                {
                    "store": store,
                    "docs": size,
                    "queries": queries,
                    "work": str(work / f"{store}-{size}"),
                },
                timeout=timeout,
                log=log,
            )
            result.setdefault("docs", size)
            result.setdefault("store", store)
            rows.append(result)
            if "error" not in result:
                log(
                    f"[scale] {store} {size:,}: upsert {result['upsert_s']:.1f}s "
                    f"({result['docs_per_s']:.0f}/s), p50 {result['query_ms']['p50']:.2f} ms "
                    f"p95 {result['query_ms']['p95']:.2f} ms"
                )
    return rows


def ingestion(docs: int, work: Path, rounds: int = 2, timeout=1800, log=print):
    log(f"[ingest] {docs} SciFact abstracts, {rounds} rounds ...")
    result = run_worker(
        "ingest", {"docs": docs, "work": str(work), "rounds": rounds}, timeout=timeout, log=log
    )
    if "error" not in result:
        log(
            f"[ingest] raw encode {result['raw_chunks_per_s']:.1f} chunks/s, ingest "
            f"{result['ingest_chunks_per_s']:.1f} chunks/s ({result['ingest_docs_per_s']:.1f} "
            f"docs/s) = {100 * result['ingest_vs_raw']:.0f}% of raw"
        )
    return result
