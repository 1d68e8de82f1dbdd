"""Scale: BM25 (both engines) on a synthetic corpus, the embedded dense stores on clustered
vectors (``bench/ann_stores.py``: the shipped Qdrant Edge beside Qdrant local mode and Milvus
Lite, recall@10 against exact search), and ingestion against the embedding model's raw encode
rate. Each measurement runs in its own process (``bench/worker.py``, ``bench/ann_stores.py
--worker``) so its peak memory is its own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from bench.measure import INLINE_ENV, run_module
from bench.worker import run_worker

STORES = ("edge", "qdrant_local", "milvus_lite")
"""The shipped embedded store first, then the two it replaced as the default."""

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


def edge_defaults() -> dict[str, int]:
    """The shipped Qdrant Edge HNSW settings (``backends/qdrant_edge/retriever.py``)."""
    from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeSettings

    settings = QdrantEdgeSettings()
    return {"hnsw_ef": settings.hnsw_ef, "m": settings.m, "ef_construct": settings.ef_construct}


def _ann_rows(store: str, size: int, queries: int, work: Path, timeout: float) -> list[dict]:
    """One (store, size) of ``bench.ann_stores``: its ``run_one`` in this process when workers
    run inline (the smoke run), else its own worker process (``--worker STORE N``)."""
    edge = edge_defaults()
    if os.environ.get(INLINE_ENV):
        import torch

        from bench.ann_stores import run_one

        threads = torch.get_num_threads()
        try:  # run_one pins torch to one thread: give the harness its threads back
            return run_one(
                store, size, queries, work, [edge["hnsw_ef"]], edge["m"], edge["ef_construct"]
            )
        finally:
            torch.set_num_threads(threads)
    arguments = ["bench.ann_stores", "--worker", store, str(size)]
    arguments += ["--queries", str(queries), "--work", str(work.parent)]
    arguments += ["--hnsw-ef", str(edge["hnsw_ef"]), "--m", str(edge["m"])]
    arguments += ["--ef-construct", str(edge["ef_construct"])]
    result = run_module(arguments, timeout=timeout)
    return [result] if "error" in result else result["rows"]


def store_scale(sizes, work: Path, stores=STORES, queries=100, timeout=1800, log=print):
    """Each store at each size on the same clustered 384-d vectors (``bench.ann_stores``): the
    bundled MiniLM encoding a question plus the store's top-10 search, recall@10 against exact
    numpy search, upsert rate and index build. Qdrant Edge runs at its shipped HNSW settings."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        for store in stores:
            log(f"[scale] {store} at {size:,} clustered vectors ...")
            found = _ann_rows(store, size, queries, work / f"{store}-{size}", timeout)
            shutil.rmtree(work / f"{store}-{size}", ignore_errors=True)
            for result in found:
                result.setdefault("n", size)
                result.setdefault("store", store)
                rows.append(result)
                if "error" in result:
                    log(f"[scale] {store} {size:,}: {result['error']}")
                    continue
                log(
                    f"[scale] {store} {size:,}: query p50 {result['query_ms']['p50']:.1f} ms "
                    f"(CPU {result['query_cpu_ms']['p50']:.1f}), recall@10 "
                    f"{result['recall_at_10']:.3f}, upsert {result['upsert_per_s']:,.0f}/s, "
                    f"build {result['build_s']:.1f} s"
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
