"""One scale measurement per process (``python -m bench.worker TASK JSON``), so peak memory is
that measurement's own. Prints one ``BENCH-RESULT {json}`` line; ``run_worker`` is the
caller's side (``bench/scale.py``).

Tasks:
  bm25   {docs, engine, queries, seed}          index build time, memory, query p50/p95
  store  {store, docs, dim, queries, seed, work} upsert time, memory, query p50/p95
  ingest {docs, work}                            ingest docs/s vs the model's raw encode rate
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from bench.data import (  # noqa: E402
    doc_text,
    load_scifact,
    random_unit_vectors,
    synthetic_corpus,
)
from bench.measure import (  # noqa: E402
    INLINE_ENV,
    current_rss_mb,
    emit,
    peak_rss_mb,
    run_module,
    summary_ms,
    tree_cpu_seconds,
)


def scifact_texts_and_queries(n_queries: int) -> tuple[list[str], list[str]]:
    test = load_scifact("test")
    return [doc_text(d) for d in test.corpus.values()], list(test.queries.values())[:n_queries]


def bm25_task(args: dict) -> dict:
    from parallel_rag.backends.bm25.index import BM25Index

    texts, queries = scifact_texts_and_queries(args.get("queries", 100))
    started = time.perf_counter()
    chunks = synthetic_corpus(texts, args["docs"], seed=args.get("seed", 0))
    generate_s = time.perf_counter() - started
    del texts
    gc.collect()
    rss_before = current_rss_mb()
    started = time.perf_counter()
    index = BM25Index.from_chunks(chunks, engine=args["engine"])
    build_s = time.perf_counter() - started
    gc.collect()
    rss_after = current_rss_mb()
    for q in queries[:3]:
        index.search(q, k=10)
    times, cpu = [], []
    for q in queries:
        began, began_cpu = time.perf_counter(), time.process_time()
        index.search(q, k=10)
        times.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
    return {
        "docs": len(chunks),
        "engine": args["engine"],
        "generate_s": generate_s,
        "build_s": build_s,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "index_mb": rss_after - rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "terms": len(index.vocabulary),
        "query_ms": summary_ms(times),
        "query_cpu_ms": summary_ms(cpu),
    }


class RandomQueryEmbeddings:
    """Query vectors for store scale runs: a fixed random unit vector per text (no model)."""

    def __init__(self, dim: int):
        self.dim = dim

    def _vector(self, text: str) -> list[float]:
        seed = int.from_bytes(text.encode("utf-8")[:8].ljust(8, b"\0"), "little")
        return random_unit_vectors(1, self.dim, seed=seed % (2**32))[0].tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]


@contextmanager
def random_query_embeddings(dim: int):
    """Within the block the stores' ``load_embeddings`` returns the random stand-in."""
    from langchain_core.embeddings import Embeddings

    class Stub(RandomQueryEmbeddings, Embeddings):
        pass

    stub = Stub(dim)
    import parallel_rag.backends.milvus.stores as milvus
    import parallel_rag.backends.qdrant.retriever as qdrant

    saved = [(module, module.load_embeddings) for module in (qdrant, milvus)]
    for module, _ in saved:
        module.load_embeddings = lambda *a, **k: stub
    try:
        yield
    finally:
        for module, original in saved:
            module.load_embeddings = original


def store_task(args: dict) -> dict:
    with random_query_embeddings(args.get("dim", 384)):
        return _store_task(args)


def _store_task(args: dict) -> dict:
    work = Path(args["work"])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dim = args.get("dim", 384)
    texts, queries = scifact_texts_and_queries(args.get("queries", 100))
    chunks = synthetic_corpus(texts, args["docs"], seed=args.get("seed", 0))
    del texts
    vectors = random_unit_vectors(len(chunks), dim, seed=args.get("seed", 0))
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, c[0])) for c in chunks]
    columns = {
        "ids": ids,
        "texts": [c[1] for c in chunks],
        "metadatas": [c[2] for c in chunks],
        "vectors": vectors.tolist(),
        "replace_file_ids": [],
    }
    del chunks
    gc.collect()
    rss_before = current_rss_mb()
    if args["store"] == "qdrant":
        from parallel_rag.backends.qdrant.retriever import (
            QdrantRetriever,
            QdrantSettings,
            write_chunks,
        )

        settings = QdrantSettings(collection="scale", path=str(work / "qdrant"))
        started = time.perf_counter()
        write_chunks(settings, None, **columns)
        upsert_s = time.perf_counter() - started
        retriever = QdrantRetriever(settings=settings, k=10, embedding_model="bench-random")
    else:
        from parallel_rag.backends.milvus.retriever import MilvusRetriever
        from parallel_rag.backends.milvus.settings import MilvusSettings
        from parallel_rag.backends.milvus.writes import write_chunks

        settings = MilvusSettings(collection="scale", uri=str(work / "milvus.db"))
        started = time.perf_counter()
        write_chunks(settings, None, embedding_model="bench-random", **columns)
        upsert_s = time.perf_counter() - started
        retriever = MilvusRetriever(settings=settings, k=10, embedding_model="bench-random")
    rss_after = current_rss_mb()
    for q in queries[:3]:
        retriever.invoke(q)
    times, cpu = [], []
    hits = 0
    tree_started = tree_cpu_seconds()
    for q in queries:
        began, began_cpu = time.perf_counter(), time.process_time()
        hits += len(retriever.invoke(q))
        times.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
    tree_ms = 1000 * (tree_cpu_seconds() - tree_started) / max(len(queries), 1)
    disk = sum(p.stat().st_size for p in work.rglob("*") if p.is_file()) / 2**20
    return {
        "store": args["store"],
        "docs": len(ids),
        "upsert_s": upsert_s,
        "docs_per_s": len(ids) / upsert_s,
        "rss_growth_mb": rss_after - rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "disk_mb": disk,
        "hits_per_query": hits / max(len(queries), 1),
        "query_ms": summary_ms(times),
        "query_cpu_ms": summary_ms(cpu),
        "query_tree_cpu_ms_mean": tree_ms,
    }


def ingest_task(args: dict) -> dict:
    """End-to-end ``ingest_paths`` (read, chunk, embed, write BM25 + Qdrant) on N SciFact
    abstracts against ``embed_documents`` alone on the same chunk texts."""
    from parallel_rag.backends.encoders.embeddings import load_embeddings
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.ingestion import ingest_paths
    from parallel_rag.studio.ingestion.chunk import load_chunks

    work = Path(args["work"])
    shutil.rmtree(work, ignore_errors=True)
    (work / "docs").mkdir(parents=True)
    test = load_scifact("test")
    docs = list(test.corpus.items())[: args["docs"]]
    source = work / "docs" / "scifact.jsonl"
    with open(source, "w", encoding="utf-8") as handle:
        for doc_id, doc in docs:
            record = {"id": doc_id, "title": doc["title"], "text": doc["text"]}
            handle.write(json.dumps(record) + "\n")
    texts = [c.content for c in load_chunks(source)]
    model = load_embeddings()
    model.embed_documents(texts[:8])  # model load and first-call costs out of both timings
    queries = list(test.queries.values())[:30]
    query_ms = []
    for q in queries:
        began = time.perf_counter()
        model.embed_query(q)
        query_ms.append((time.perf_counter() - began) * 1000)
    rss_before = current_rss_mb()
    raw = []
    ingest = []
    config = parse_config(
        {
            "retrievers": [
                {
                    "name": "lexical",
                    "backend": "bm25",
                    "backend_config": {"index_path": str(work / "index" / "bm25")},
                },
                {
                    "name": "dense",
                    "backend": "qdrant",
                    "backend_config": {
                        "collection": "ingest",
                        "path": str(work / "index" / "qdrant"),
                    },
                },
            ]
        }
    )
    for _ in range(args.get("rounds", 2)):  # alternate: a shared CPU's load hits both alike
        began = time.perf_counter()
        model.embed_documents(texts)
        raw.append(time.perf_counter() - began)
        began = time.perf_counter()
        ingest_paths([source], config, work, progress=False)
        ingest.append(time.perf_counter() - began)
    raw_s, ingest_s = float(np.median(raw)), float(np.median(ingest))
    return {
        "docs": len(docs),
        "chunks": len(texts),
        "raw_encode_s": raw_s,
        "ingest_s": ingest_s,
        "raw_chunks_per_s": len(texts) / raw_s,
        "ingest_docs_per_s": len(docs) / ingest_s,
        "ingest_chunks_per_s": len(texts) / ingest_s,
        "ingest_vs_raw": raw_s / ingest_s,
        "query_encode_ms": summary_ms(query_ms),
        "rss_growth_mb": current_rss_mb() - rss_before,
        "peak_rss_mb": peak_rss_mb(),
    }


TASKS = {"bm25": bm25_task, "store": store_task, "ingest": ingest_task}


def run_worker(task: str, args: dict, *, timeout: float, log=print) -> dict:
    """Run ``python -m bench.worker TASK JSON`` in a fresh process (so its peak memory is its
    own) and return its result; failures come back as ``{"error": ...}``, never raised.
    With ``$BENCH_INLINE_WORKERS`` set (the smoke run) the task runs in this process instead:
    no start-up cost, but its memory figures are the whole harness's."""
    if os.environ.get(INLINE_ENV):
        try:
            return TASKS[task](args)
        except Exception as error:  # noqa: BLE001 - reported like a failed worker
            log(f"[worker] {task} {args}: {type(error).__name__}: {error}")
            return {"error": f"{type(error).__name__}: {error}"[:400]}
    result = run_module(["bench.worker", task, json.dumps(args)], timeout=timeout)
    if "error" in result:
        log(f"[worker] {task} {args}: {result['error']}")
    return result


def main() -> None:
    task, raw = sys.argv[1], sys.argv[2]
    emit(TASKS[task](json.loads(raw)))


if __name__ == "__main__":
    main()
