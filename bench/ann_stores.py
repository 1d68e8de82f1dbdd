"""Embedded dense stores side by side: Qdrant Edge, FAISS HNSW, Qdrant local mode, Milvus Lite.

Every store gets the same clustered synthetic 384-d unit vectors (cluster centres plus noise, so
neighbourhoods have the structure of encoded text; on pure random unit vectors HNSW recall
collapses, which says nothing about real corpora). Each (store, size) runs in its own process
so its memory and CPU are its own, and reports:

- upsert vectors/s (vectors ready; encoding excluded) and the index build that follows it;
- dense query p50/p95, wall and CPU: the bundled all-MiniLM-L6-v2 encoding a real question,
  then the store's top-10 search with a query vector drawn from the same clusters;
- recall@10 of those searches against exact numpy search over the same vectors.

Run ``python -m bench.ann_stores`` (``--sizes 100000,1000000 --stores edge,faiss``); the table
is printed and written to ``bench/ANN-RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.measure import REPO_ROOT, emit, peak_rss_mb, summary_ms, tree_cpu_seconds

DIM = 384
CLUSTERS = 1000
NOISE = 0.06  # per-dimension noise: a point's cosine to its centre is ~0.6, like MiniLM text
K = 10
STORES = ("edge", "faiss", "qdrant_local", "milvus_lite")
LABELS = {
    "edge": "Qdrant Edge (HNSW m=16, ef_construct=100, hnsw_ef=128)",
    "faiss": "FAISS IndexHNSWFlat (M=16, efConstruction=100, efSearch=128)",
    "qdrant_local": "Qdrant local mode (qdrant-client; upsert into path=, queries in memory)",
    "milvus_lite": "Milvus Lite (pymilvus uri=file.db)",
}
BATCH = 1000
QDRANT_LOCAL_TIMED = 5000
"""Qdrant local mode persists about 40 vectors/s here (one SQLite write per point): its upsert
rate is measured on the first vectors into ``path=``, and its queries run over the same
brute-force search in memory holding all of them."""
QUESTIONS = [
    "What causes antibiotic resistance in hospital bacteria?",
    "How does vitamin D affect bone density in older adults?",
    "Which genes are linked to early onset Alzheimer's disease?",
    "Does regular exercise lower blood pressure?",
    "What is the role of T cells in autoimmune disease?",
    "How do statins reduce cardiovascular risk?",
    "Is there a link between sleep and memory consolidation?",
    "What are the side effects of long term steroid use?",
]


def clustered_vectors(n: int, seed: int, centres: np.ndarray) -> np.ndarray:
    """``n`` unit vectors, each a random cluster centre plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        size = min(100_000, n - start)
        picks = rng.integers(0, len(centres), size)
        block = centres[picks] + rng.normal(0, NOISE, (size, DIM)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + size] = block
    return out


def dataset(n: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(12345)
    centres = rng.normal(0, 1, (CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return clustered_vectors(n, 1, centres), clustered_vectors(queries, 2, centres)


def exact_top_k(vectors: np.ndarray, query_vectors: np.ndarray) -> np.ndarray:
    """Exact top-``K`` ids by inner product (the vectors are unit: cosine)."""
    best = np.empty((len(query_vectors), K), dtype=np.int64)
    for i, q in enumerate(query_vectors):
        scores = vectors @ q
        top = np.argpartition(-scores, K)[:K]
        best[i] = top[np.argsort(-scores[top])]
    return best


# ---------------------------------------------------------------------------------------- stores
# Each opener returns (upsert(ids, vectors, payloads), build(), search(vector) -> ids).


def edge_store(work: Path, n: int):
    from qdrant_edge import (
        Distance,
        EdgeConfig,
        EdgeShard,
        EdgeVectorParams,
        HnswIndexConfig,
        Point,
        Query,
        QueryRequest,
        SearchParams,
        UpdateOperation,
    )

    config = EdgeConfig(
        vectors=EdgeVectorParams(size=DIM, distance=Distance.Cosine),
        max_search_threads=1,
        hnsw_config=HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10_000),
    )
    shard = EdgeShard.create(str(work / "edge"), config)

    def upsert(ids, vectors, payloads):
        rows = zip(ids, vectors, payloads, strict=True)
        points = [Point(int(i), v.tolist(), p) for i, v, p in rows]
        shard.update(UpdateOperation.upsert_points(points))

    def build():
        shard.optimize()
        shard.flush()

    params = SearchParams(hnsw_ef=128)

    def search(vector):
        hits = shard.query(
            QueryRequest(limit=K, query=Query.Nearest(vector.tolist()), params=params)
        )
        return [int(h.id) for h in hits]

    return upsert, build, search


def faiss_store(work: Path, n: int):
    import faiss

    index = faiss.IndexIDMap2(faiss.IndexHNSWFlat(DIM, 16, faiss.METRIC_INNER_PRODUCT))
    faiss.downcast_index(index.index).hnsw.efConstruction = 100

    def upsert(ids, vectors, payloads):
        index.add_with_ids(np.ascontiguousarray(vectors), np.asarray(ids, dtype=np.int64))

    def build():
        faiss.write_index(index, str(work / "faiss.index"))

    faiss.downcast_index(index.index).hnsw.efSearch = 128

    def search(vector):
        _, found = index.search(vector[None, :], K)
        return [int(i) for i in found[0]]

    return upsert, build, search


def qdrant_local_store(work: Path, n: int):
    import warnings

    from qdrant_client import QdrantClient, models

    warnings.filterwarnings("ignore")
    disk = QdrantClient(path=str(work / "qdrant"))
    client = QdrantClient(location=":memory:")
    for target in (disk, client):
        target.create_collection(
            "bench",
            vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        )
    timed = {"vectors": 0, "seconds": 0.0}

    def upsert(ids, vectors, payloads):
        batch = models.Batch(ids=[int(i) for i in ids], vectors=vectors.tolist(), payloads=payloads)
        if timed["vectors"] < QDRANT_LOCAL_TIMED:
            began = time.perf_counter()
            disk.upsert("bench", points=batch)
            timed["seconds"] += time.perf_counter() - began
            timed["vectors"] += len(ids)
        client.upsert("bench", points=batch)

    upsert.timed = timed

    def build():
        pass

    def search(vector):
        hits = client.query_points("bench", query=vector.tolist(), limit=K).points
        return [int(h.id) for h in hits]

    return upsert, build, search


def milvus_lite_store(work: Path, n: int):
    from pymilvus import MilvusClient

    client = MilvusClient(uri=str(work / "milvus.db"))
    client.create_collection("bench", dimension=DIM, metric_type="COSINE", auto_id=False)

    def upsert(ids, vectors, payloads):
        client.insert(
            "bench",
            [
                {"id": int(i), "vector": v.tolist(), **p}
                for i, v, p in zip(ids, vectors, payloads, strict=True)
            ],
        )

    def build():
        client.flush("bench")
        client.load_collection("bench")

    def search(vector):
        hits = client.search("bench", data=[vector.tolist()], limit=K)[0]
        return [int(h["id"]) for h in hits]

    return upsert, build, search


OPENERS: dict[str, Callable] = {
    "edge": edge_store,
    "faiss": faiss_store,
    "qdrant_local": qdrant_local_store,
    "milvus_lite": milvus_lite_store,
}


# ---------------------------------------------------------------------------------------- worker


def run_one(store: str, n: int, queries: int, work: Path) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    vectors, query_vectors = dataset(n, queries)
    truth = exact_top_k(vectors, query_vectors)
    exact_ms = []
    for q in query_vectors[:20]:
        began = time.perf_counter()
        scores = vectors @ q
        np.argpartition(-scores, K)[:K]
        exact_ms.append((time.perf_counter() - began) * 1000)

    import torch
    from parallel_rag.backends.embeddings import load_embeddings

    torch.set_num_threads(1)  # two shared cores: torch's intra-op threads only contend
    model = load_embeddings()
    model.embed_query("warm up")

    upsert, build, search = OPENERS[store](work, n)
    # Milvus Lite searches in a child process: count the tree (10 ms ticks); others in-process.
    cpu_clock = tree_cpu_seconds if store == "milvus_lite" else time.process_time
    wall, cpu = time.perf_counter(), cpu_clock()
    for start in range(0, n, BATCH):
        ids = range(start, min(start + BATCH, n))
        payloads = [{"tenant": f"t{i % 4}", "file_id": f"f{i // 10}"} for i in ids]
        upsert(list(ids), vectors[start : start + BATCH], payloads)
    upsert_s, upsert_cpu = time.perf_counter() - wall, cpu_clock() - cpu
    upsert_rate = n / upsert_s
    if hasattr(upsert, "timed"):
        upsert_rate = upsert.timed["vectors"] / upsert.timed["seconds"]
    wall, cpu = time.perf_counter(), cpu_clock()
    build()
    build_s, build_cpu = time.perf_counter() - wall, cpu_clock() - cpu

    for q in query_vectors[:3]:
        search(q)
    times, cpus, search_times, encode_times, hits = [], [], [], [], 0.0
    for i, q in enumerate(query_vectors):
        began, began_cpu = time.perf_counter(), cpu_clock()
        model.embed_query(QUESTIONS[i % len(QUESTIONS)] + f" ({i})")
        encoded = time.perf_counter()
        found = search(q)
        done = time.perf_counter()
        times.append((done - began) * 1000)
        search_times.append((done - encoded) * 1000)
        encode_times.append((encoded - began) * 1000)
        cpus.append((cpu_clock() - began_cpu) * 1000)
        hits += len(set(found) & set(truth[i].tolist())) / K
    disk = sum(p.stat().st_size for p in work.rglob("*") if p.is_file()) / 2**20
    return {
        "store": store,
        "n": n,
        "upsert_per_s": upsert_rate,
        "encode_ms": summary_ms(encode_times),
        "upsert_s": upsert_s,
        "upsert_cpu_s": upsert_cpu,
        "build_s": build_s,
        "build_cpu_s": build_cpu,
        "query_ms": summary_ms(times),
        "query_cpu_ms": summary_ms(cpus),
        "search_ms": summary_ms(search_times),
        "recall_at_10": hits / len(query_vectors),
        "exact_numpy_ms_p50": float(np.median(exact_ms)),
        "peak_rss_mb": peak_rss_mb(),
        "disk_mb": disk,
    }


# ---------------------------------------------------------------------------------------- report


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in (
        "qdrant-edge-py",
        "faiss-cpu",
        "qdrant-client",
        "milvus-lite",
        "pymilvus",
        "numpy",
    ):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def fmt_row(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"| {r['store']} | {r['n']:,} | error: {r['error'][:120]} | | | | | | | |"
    return (
        f"| {r['store']} | {r['n']:,} | {r['query_ms']['p50']:.1f} / {r['query_ms']['p95']:.1f} "
        f"| {r['query_cpu_ms']['p50']:.1f} | {r['encode_ms']['p50']:.1f} "
        f"| {r['search_ms']['p50']:.2f} "
        f"| {r['recall_at_10']:.3f} "
        f"| {r['upsert_per_s']:,.0f} ({r['upsert_cpu_s']:.1f} s CPU) "
        f"| {r['build_s']:.1f} s ({r['build_cpu_s']:.1f} s CPU) "
        f"| {r['peak_rss_mb']:,.0f} / {r['disk_mb']:,.0f} |"
    )


HEADER = (
    "| store | vectors | query p50 / p95 ms (encode + search, wall) | query CPU p50 ms "
    "| encode alone p50 ms | search alone p50 ms | recall@10 | upsert vectors/s | index build "
    "| peak RSS / disk MB |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def write_report(rows: list[dict[str, Any]], command: str, load: str, path: Path) -> str:
    lines = [
        "# Embedded dense stores at 100k+ vectors",
        "",
        f"Command: `{command}` (under `nice -n 10`). Machine: {os.cpu_count()} cores shared with "
        f"other jobs; load average at start {load}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions().items())
        + ".",
        "",
        f"Data: {CLUSTERS} random unit cluster centres in {DIM}-d, each vector a centre plus "
        f"N(0, {NOISE}) per dimension, normalised; queries drawn the same way. Query time is the "
        "bundled all-MiniLM-L6-v2 encoding a question plus the store's top-10 search; recall@10 "
        "is against exact numpy search over the same vectors. Upsert excludes encoding, "
        f"batches of {BATCH} with a small payload (tenant, file_id); index build is what runs "
        "after the upserts before the store answers at full speed (Qdrant Edge `optimize()`, "
        "FAISS writing its index file, Milvus flush + load).",
        "",
        "Bars: query p50 <= 25 ms at 100k and <= 60 ms at 1M, recall@10 >= 0.95, upsert >= "
        "2,000 vectors/s.",
        "",
        HEADER,
        *[fmt_row(r) for r in rows],
        "",
    ]
    for r in rows:
        if "exact_numpy_ms_p50" in r:
            lines.append(
                f"- exact numpy search over {r['n']:,} vectors (one query, no encode): "
                f"{r['exact_numpy_ms_p50']:.1f} ms p50"
            )
            break
    lines.append("")
    text = "\n".join(lines)
    path.write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--work", default="/tmp/parallel-rag-ann")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "ANN-RESULTS.md"))
    parser.add_argument("--merge", action="store_true", help="keep rows of earlier runs")
    parser.add_argument("--worker", nargs=2, metavar=("STORE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        store, n = args.worker[0], int(args.worker[1])
        emit(run_one(store, n, args.queries, Path(args.work) / f"{store}-{n}"))
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    raw = REPO_ROOT / "bench" / "out" / "ann_stores.json"  # every row so far, for --merge
    raw.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(raw.read_text()) if args.merge and raw.exists() else []
    for n in [int(s) for s in args.sizes.split(",")]:
        for store in args.stores.split(","):
            print(f"[ann] {store} at {n:,} vectors ...", flush=True)
            command = [sys.executable, "-m", "bench.ann_stores", "--worker", store, str(n)]
            command += ["--queries", str(args.queries), "--work", args.work]
            try:
                done = subprocess.run(
                    command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=args.timeout
                )
                result = next(
                    (
                        json.loads(line.split(" ", 1)[1])
                        for line in done.stdout.splitlines()
                        if line.startswith("BENCH-RESULT ")
                    ),
                    {"error": (done.stderr.strip().splitlines() or ["no result"])[-1]},
                )
            except subprocess.TimeoutExpired:
                result = {"error": f"timed out after {args.timeout:.0f}s"}
            result.setdefault("store", store)
            result.setdefault("n", n)
            rows = [r for r in rows if (r["store"], r["n"]) != (store, n)] + [result]
            print(fmt_row(result), flush=True)
            shutil.rmtree(Path(args.work) / f"{store}-{n}", ignore_errors=True)
            raw.write_text(json.dumps(rows, indent=1))
    rows.sort(key=lambda r: (r["n"], STORES.index(r["store"]) if r["store"] in STORES else 9))
    command = "python -m bench.ann_stores " + " ".join(argv if argv is not None else sys.argv[1:])
    print(write_report(rows, command.strip(), load, Path(args.out)))


if __name__ == "__main__":
    main()
