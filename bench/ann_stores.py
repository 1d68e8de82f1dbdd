"""Embedded dense stores side by side: Qdrant Edge, FAISS HNSW, Qdrant local mode, Milvus Lite.

Every store gets the same clustered synthetic 384-d unit vectors (cluster centres plus noise, so
neighbourhoods have the structure of encoded text; on pure random unit vectors HNSW recall
collapses, which says nothing about real corpora). Each (store, size) runs in its own process
so its memory and CPU are its own, and reports:

- upsert vectors/s (vectors ready; encoding excluded) and the index build that follows it;
- dense query p50/p95, wall and CPU: the bundled all-MiniLM-L6-v2 encoding a real question,
  then the store's top-10 search with a query vector drawn from the same clusters;
- recall@10 of those searches against exact numpy search over the same vectors.

HNSW build settings (``--m``, ``--ef-construct``) apply to Qdrant Edge and FAISS; the search
beam (``--hnsw-ef 128,256,512``: Qdrant's ``hnsw_ef``, FAISS's ``efSearch``) is a search-time
setting, so one build is queried at each value and reports one row per value.

``--encoders 100`` instead measures ways of running the query encoder on the same questions
(langchain over sentence-transformers on torch with 2 or 1 threads, sentence-transformers
directly, a bare ``torch.inference_mode`` forward, and the shipped path, ONNX Runtime): p50
wall and CPU per question and each vector's cosine with the torch one; its table goes into the
same report.

``--sentences 5`` adds the product's embedded default dense branch at each size: a Qdrant Edge
collection written through ``backends.qdrant_edge_writes.write_chunks`` (passages on, sentence
weight 0.5: every chunk's vector in one shard, its five sentences, each the chunk vector plus noise,
in a second), queried through ``QdrantEdgeRetriever`` at k 20; recall@10 against the exact
mixed score (0.5 x chunk + 0.5 x best sentence) in numpy.

Run ``python -m bench.ann_stores`` (``--sizes 100000,1000000 --stores edge,faiss``); the table
is printed and written to ``bench/ANN-RESULTS.md``; hand-written findings below its
``## Reading`` heading survive a re-run, and ``--merge`` keeps the rows of earlier runs.
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
HNSW_STORES = ("edge", "faiss")
"""Stores with HNSW settings: the others search exhaustively (Qdrant local mode) or with their
own index defaults (Milvus Lite), so their rows carry no m / ef."""
# the one-vector rows' build beam unless --ef-construct says (the rows of runs 1-7 used it)
ONE_VECTOR_EF_CONSTRUCT = 100
FINDINGS = "## Reading"
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


def ranked_top_k(scores: np.ndarray) -> np.ndarray:
    """The ``K`` best-scored ids, best first."""
    top = np.argpartition(-scores, K)[:K]
    return top[np.argsort(-scores[top])]


def exact_top_k(vectors: np.ndarray, query_vectors: np.ndarray) -> np.ndarray:
    """Exact top-``K`` ids by inner product (the vectors are unit: cosine)."""
    return np.stack([ranked_top_k(vectors @ q) for q in query_vectors])


# ---------------------------------------------------------------------------------------- stores
# Each opener takes the HNSW build settings and returns
# (upsert(ids, vectors, payloads), build(), search(vector, ef) -> ids).


def edge_store(work: Path, n: int, m: int, ef_construct: int):
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
        hnsw_config=HnswIndexConfig(m=m, ef_construct=ef_construct, full_scan_threshold=10_000),
    )
    shard = EdgeShard.create(str(work / "edge"), config)

    def upsert(ids, vectors, payloads):
        rows = zip(ids, vectors, payloads, strict=True)
        points = [Point(int(i), v.tolist(), p) for i, v, p in rows]
        shard.update(UpdateOperation.upsert_points(points))

    def build():
        shard.optimize()
        shard.flush()

    def search(vector, ef):
        params = SearchParams(hnsw_ef=ef)
        hits = shard.query(
            QueryRequest(limit=K, query=Query.Nearest(vector.tolist()), params=params)
        )
        return [int(h.id) for h in hits]

    return upsert, build, search


def faiss_store(work: Path, n: int, m: int, ef_construct: int):
    import faiss

    index = faiss.IndexIDMap2(faiss.IndexHNSWFlat(DIM, m, faiss.METRIC_INNER_PRODUCT))
    faiss.downcast_index(index.index).hnsw.efConstruction = ef_construct

    def upsert(ids, vectors, payloads):
        index.add_with_ids(np.ascontiguousarray(vectors), np.asarray(ids, dtype=np.int64))

    def build():
        faiss.write_index(index, str(work / "faiss.index"))

    def search(vector, ef):
        faiss.downcast_index(index.index).hnsw.efSearch = ef
        _, found = index.search(vector[None, :], K)
        return [int(i) for i in found[0]]

    return upsert, build, search


def qdrant_local_store(work: Path, n: int, m: int, ef_construct: int):
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

    def search(vector, ef):
        hits = client.query_points("bench", query=vector.tolist(), limit=K).points
        return [int(h.id) for h in hits]

    return upsert, build, search


def milvus_lite_store(work: Path, n: int, m: int, ef_construct: int):
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

    def search(vector, ef):
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


def timed_queries(
    count: int,
    encode: Any,
    search: Any,
    truth: np.ndarray,
    cpu_clock: Any = time.process_time,
) -> dict[str, Any]:
    """Query ``i`` of ``count`` timed as ``encode(i)`` (a new question text through the
    shipped encoder) then ``search(i)`` (the ids it found, best first): wall and CPU of the
    whole and of each part, and recall@10 of the search against ``truth[i]``."""
    times, cpus, search_times, search_cpus, encode_times = [], [], [], [], []
    hits = 0.0
    for i in range(count):
        began, began_cpu = time.perf_counter(), cpu_clock()
        encode(i)
        encoded, encoded_cpu = time.perf_counter(), cpu_clock()
        found = search(i)
        done, done_cpu = time.perf_counter(), cpu_clock()
        times.append((done - began) * 1000)
        search_times.append((done - encoded) * 1000)
        encode_times.append((encoded - began) * 1000)
        cpus.append((done_cpu - began_cpu) * 1000)
        search_cpus.append((done_cpu - encoded_cpu) * 1000)
        hits += len(set(list(found)[:K]) & set(truth[i].tolist())) / K
    return {
        "encode_ms": summary_ms(encode_times),
        "query_ms": summary_ms(times),
        "query_cpu_ms": summary_ms(cpus),
        "search_ms": summary_ms(search_times),
        "search_cpu_ms": summary_ms(search_cpus),
        "recall_at_10": hits / count,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_one(
    store: str, n: int, queries: int, work: Path, efs: list[int], m: int, ef_construct: int
) -> list[dict[str, Any]]:
    """Build one index of ``n`` vectors, then query it at each search beam in ``efs``: one row
    per beam, sharing the build's upsert, build, memory and disk figures."""
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
    from parallel_rag.backends.encoders.embeddings import load_embeddings

    torch.set_num_threads(1)  # two shared cores: torch's intra-op threads only contend
    model = load_embeddings()
    model.embed_query("warm up")
    encoder = "onnx" if type(model.inner).__name__ == "OnnxQueryEmbeddings" else "torch"

    upsert, build, search = OPENERS[store](work, n, m, ef_construct)
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
    disk = sum(p.stat().st_size for p in work.rglob("*") if p.is_file()) / 2**20
    shared = {
        "store": store,
        "n": n,
        "encoder": encoder,
        "m": m if store in HNSW_STORES else None,
        "ef_construct": ef_construct if store in HNSW_STORES else None,
        "upsert_per_s": upsert_rate,
        "upsert_s": upsert_s,
        "upsert_cpu_s": upsert_cpu,
        "build_s": build_s,
        "build_cpu_s": build_cpu,
        "exact_numpy_ms_p50": float(np.median(exact_ms)),
        "disk_mb": disk,
    }

    rows = []
    for ef in efs if store in HNSW_STORES else efs[:1]:
        for q in query_vectors[:3]:
            search(q, ef)

        def encode(i: int, ef: int = ef) -> None:
            # a text not seen before: the shared model keeps the vectors of recent queries
            model.embed_query(QUESTIONS[i % len(QUESTIONS)] + f" ({ef}.{i})")

        timed = timed_queries(
            len(query_vectors),
            encode,
            lambda i, ef=ef: search(query_vectors[i], ef),
            truth,
            cpu_clock,
        )
        rows.append({**shared, "hnsw_ef": ef if store in HNSW_STORES else None, **timed})
    return rows


# ------------------------------------------------------------------- sentence-weighted qdrant edge
SENTENCES_STORE = "edge_sentences"
"""The product's embedded default dense branch: ``backends.qdrant_edge`` written through
``write_chunks`` with passages on and ``sentence_weight`` 0.5 (a passage shard and a sentence
shard), queried through ``QdrantEdgeRetriever`` at the branch's default ``k``."""
SENTENCE_K = 20  # candidates per dense branch by default
SENTENCE_NOISE = 0.04
"""Per-dimension noise around the chunk vector: a sentence's cosine to its chunk is ~0.8."""
SYNTHETIC_MODEL = "bench-synthetic-clusters"


SENTENCE_BLOCK = 20_000  # chunks whose sentence vectors are made (and held) at a time


def sentence_block(vectors: np.ndarray, block: int, per_chunk: int) -> np.ndarray:
    """The sentences of chunks ``block * SENTENCE_BLOCK`` onwards: each chunk's vector plus
    noise, renormalised; the same every time it is asked for (seeded by the block), so a
    million chunks' five million sentences are never held at once."""
    start = block * SENTENCE_BLOCK
    chunks = vectors[start : start + SENTENCE_BLOCK]
    rng = np.random.default_rng((3, block))
    noise = rng.normal(0, SENTENCE_NOISE, (len(chunks), per_chunk, DIM)).astype(np.float32)
    out = chunks[:, None, :] + noise
    out /= np.linalg.norm(out, axis=2, keepdims=True)
    return out


def block_count(n: int) -> int:
    return -(-n // SENTENCE_BLOCK)


class SyntheticEmbeddings:
    """Hands the write path and the retriever the synthetic vectors instead of running a
    model: sentence text ``"<chunk> <sentence> a b c."`` maps to that sentence's vector (its
    block made on first use; the write asks in chunk order), query text ``"q<i>"`` to query
    vector ``i``, warm-up text ``"w<i>"`` to a chunk's vector."""

    def __init__(self, vectors: np.ndarray, per_chunk: int, query_vectors: np.ndarray):
        self.vectors, self.per_chunk, self.query_vectors = vectors, per_chunk, query_vectors
        self.block, self.sentences = -1, np.empty((0, per_chunk, DIM), dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        rows = []
        for text in texts:
            chunk, number = (int(x) for x in text.split(" ", 2)[:2])
            if chunk // SENTENCE_BLOCK != self.block:
                self.block = chunk // SENTENCE_BLOCK
                self.sentences = sentence_block(self.vectors, self.block, self.per_chunk)
            rows.append(self.sentences[chunk % SENTENCE_BLOCK, number])
        return rows

    def embed_query(self, text: str) -> list[float]:
        if text.startswith("w"):  # a warm-up query: a chunk's own vector, none of the timed
            return self.vectors[int(text[1:]) * 9973 % len(self.vectors)].tolist()
        return self.query_vectors[int(text[1:])].tolist()


def exact_mixed_top_k(
    vectors: np.ndarray, per_chunk: int, query_vectors: np.ndarray, weight: float
) -> np.ndarray:
    """Exact top-``K`` chunks by ``(1 - weight) x passage + weight x best sentence``, the
    sentences made a block at a time."""
    best_sentence = np.empty((len(vectors), len(query_vectors)), dtype=np.float32)
    for block in range(block_count(len(vectors))):
        sentences = sentence_block(vectors, block, per_chunk)
        scores = sentences.reshape(-1, DIM) @ query_vectors.T
        start = block * SENTENCE_BLOCK
        best_sentence[start : start + len(sentences)] = scores.reshape(
            len(sentences), per_chunk, -1
        ).max(axis=1)
    mixed = (1 - weight) * (vectors @ query_vectors.T) + weight * best_sentence
    return np.stack([ranked_top_k(mixed[:, i]) for i in range(len(query_vectors))])


def exact_mixed_ms(
    vectors: np.ndarray, per_chunk: int, query_vectors: np.ndarray, weight: float
) -> list[float]:
    """Wall ms of one query's exact mixed score over sentences held in memory (what a store
    without an index would do); measured only while the sentences fit in about 1.5 GB."""
    if len(vectors) * per_chunk > 1_000_000:
        return []
    sentences = np.empty((len(vectors), per_chunk, DIM), dtype=np.float32)
    for block in range(block_count(len(vectors))):
        start = block * SENTENCE_BLOCK
        sentences[start : start + SENTENCE_BLOCK] = sentence_block(vectors, block, per_chunk)
    sentences = sentences.reshape(-1, DIM)
    timings = []
    for q in query_vectors[:20]:
        began = time.perf_counter()
        sentence = (sentences @ q).reshape(len(vectors), per_chunk).max(axis=1)
        ranked_top_k((1 - weight) * (vectors @ q) + weight * sentence)
        timings.append((time.perf_counter() - began) * 1000)
    return timings


def segment_counts(revision: Path) -> list[int]:
    """Segments a search visits in a revision: the passage shard's, then the sentence
    shard's (each segment is a folder under its shard's ``segments``)."""
    from parallel_rag.backends.qdrant_edge.writes import SENTENCES_DIR

    return [
        sum(1 for p in (shard / "segments").iterdir() if p.is_dir())
        for shard in (revision, revision / SENTENCES_DIR)
    ]


def run_sentences(
    n: int,
    per_chunk: int,
    queries: int,
    work: Path,
    efs: list[int] | None = None,
    m: int | None = None,
    ef_construct: int | None = None,
    sentence_ef_construct: int | None = None,
    candidates: list[int] | None = None,
    reuse: bool = False,
    quantizations: list[str] | None = None,
    writes: int = 1,
) -> list[dict[str, Any]]:
    """Build the product's sentence-weighted Qdrant Edge collection over ``n`` chunks of
    ``per_chunk`` sentences each through ``write_chunks`` (vectors from ``SyntheticEmbeddings``)
    and query it through ``QdrantEdgeRetriever`` at ``SENTENCE_K``; recall@10 of the mixed
    score against the exact one in numpy, at every search beam in ``efs`` and every
    ``candidates`` (chunks each search proposes per result wanted) in ``candidates``.
    ``reuse`` queries the collection an earlier ``--keep`` run left in ``work`` instead of
    building it again (a 1M build takes hours here); its rows carry no write figures.
    ``quantizations`` (``"int8"``, ``"none"``; default the product's) queries the one build
    each way: on its 8-bit copies, rescored, or on the stored vectors alone; the build holds
    copies when any is ``"int8"``. Each way's first beam is preceded by a first pass of
    queries no earlier pass made, timed apart (``first_pass_search_ms``). ``writes`` splits
    the load into that many ``write_chunks`` calls, as an ingest writes a batch at a time: one
    write puts its points in one segment per shard whatever the segment cap, so only a
    batched load has the capped segments an ingested store searches."""
    reused = reuse and (work / "edge").exists()
    if not reused:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    import torch
    from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings
    from parallel_rag.backends.qdrant_edge import points as qdrant_edge_points
    from parallel_rag.backends.qdrant_edge import retriever as qdrant_edge
    from parallel_rag.backends.qdrant_edge.search import open_revision
    from parallel_rag.backends.qdrant_edge.writes import write_chunks
    from parallel_rag.nodes.generate import sentence_vectors
    from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences

    vectors, query_vectors = dataset(n, queries)
    build = {"m": m, "ef_construct": ef_construct, "sentence_ef_construct": sentence_ef_construct}
    settings = qdrant_edge.QdrantEdgeSettings(
        path=str(work / "edge"), **{k: v for k, v in build.items() if v is not None}
    )
    ways = quantizations or [settings.quantization or "none"]
    if "int8" not in ways:
        settings = settings.model_copy(update={"quantization": None})
    weight = settings.passages.sentence_weight
    truth = exact_mixed_top_k(vectors, per_chunk, query_vectors, weight)
    exact_ms = exact_mixed_ms(vectors, per_chunk, query_vectors, weight)

    torch.set_num_threads(1)
    model = load_embeddings()
    model.embed_query("warm up")
    encoder = "onnx" if type(model.inner).__name__ == "OnnxQueryEmbeddings" else "torch"
    synthetic = SyntheticEmbeddings(vectors, per_chunk, query_vectors)
    product_load = qdrant_edge.load_embeddings
    # bench only: the write path (its points) and the retriever (its queries) get the
    # synthetic vectors for this model name
    for module in (qdrant_edge, qdrant_edge_points, sentence_vectors):
        module.load_embeddings = lambda name=BUNDLED, device="cpu": (
            synthetic if name == SYNTHETIC_MODEL else product_load(name, device)
        )
    wall, cpu = time.perf_counter(), time.process_time()
    step = -(-n // writes)
    for start in range(0, n, step) if not reused else ():
        chunks = range(start, min(start + step, n))
        write_chunks(
            settings,
            None,
            ids=[f"c{i}" for i in chunks],
            # one sentence a line: split_sentences gives them back in order
            texts=["\n".join(f"{i} {j} a b c." for j in range(per_chunk)) for i in chunks],
            metadatas=[{"tenant": f"t{i % 4}", "file_id": f"f{i // 10}"} for i in chunks],
            vectors=vectors[chunks.start : chunks.stop],
            replace_file_ids=[],
            embedding_model=SYNTHETIC_MODEL,
            sentences=GeneratorSentences(SYNTHETIC_MODEL),
        )
    write_s, write_cpu = time.perf_counter() - wall, time.process_time() - cpu
    # what a server's start does before traffic (``RAGGraphs.warm_up``): read the store in
    opened, opened_cpu = time.perf_counter(), time.process_time()
    qdrant_edge.QdrantEdgeRetriever(settings=settings, embedding_model=SYNTHETIC_MODEL).warm_up()
    open_s, open_cpu = time.perf_counter() - opened, time.process_time() - opened_cpu
    held = open_revision(settings.store_dir())
    assert held.manifest["sentences"] == n * per_chunk, held.manifest
    segments = segment_counts(settings.store_dir() / held.revision)
    disk = sum(p.stat().st_size for p in work.rglob("*") if p.is_file()) / 2**20
    rows = []
    searches = [  # the product's beam and candidates always measured
        (way, ef, c)
        for way in ways
        for ef in sorted({*(efs or []), settings.hnsw_ef})
        for c in sorted({*(candidates or []), settings.candidates})
    ]
    first_passes: set[str] = set()
    for way, ef, proposed in searches:
        quantization = None if way == "none" else way
        searched = settings.model_copy(
            update={"hnsw_ef": ef, "candidates": proposed, "quantization": quantization}
        )
        retriever = qdrant_edge.QdrantEdgeRetriever(
            settings=searched, k=SENTENCE_K, embedding_model=SYNTHETIC_MODEL
        )
        cold = {}
        if way not in first_passes:
            first_passes.add(way)
            # a process's first queries over parts of a store it has not read are slower (at
            # 1M chunks x 5 sentences, 10 GB: 60-80 ms a query on the stored vectors): as
            # many queries (chunk vectors, other ones for each way) first, timed apart
            began = []
            offset = ways.index(way) * len(query_vectors)
            for i in range(offset, offset + len(query_vectors)):
                start = time.perf_counter()
                retriever.invoke(f"w{i}")
                began.append((time.perf_counter() - start) * 1000)
            cold = {"first_pass_search_ms": summary_ms(began)}
        for i in range(3):
            retriever.invoke(f"q{i}")
        timed = timed_queries(
            len(query_vectors),
            # a text no earlier beam's queries used: the encoder's cache serves none of them
            lambda i, ef=ef, proposed=proposed, way=way: model.embed_query(
                QUESTIONS[i % len(QUESTIONS)] + f" (sentences.{way}.{ef}.{proposed}.{i})"
            ),
            lambda i, retriever=retriever: [int(d.id[1:]) for d in retriever.invoke(f"q{i}")],
            truth,
        )
        rows.append(
            {
                "store": SENTENCES_STORE,
                "n": n,
                "sentences": per_chunk,
                "k": SENTENCE_K,
                "encoder": encoder,
                "m": settings.m,
                "ef_construct": settings.ef_construct,
                "sentence_ef_construct": settings.sentence_ef_construct,
                "hnsw_ef": ef,
                "candidates": proposed,
                "quantization": way,
                "writes": writes,
                "segments": segments,
                **(
                    {"reused": True}
                    if reused
                    else {
                        "upsert_per_s": n * (1 + per_chunk) / write_s,
                        "upsert_s": write_s,
                        "upsert_cpu_s": write_cpu,
                        "build_s": write_s,
                        "build_cpu_s": write_cpu,
                    }
                ),
                **({"exact_numpy_ms_p50": float(np.median(exact_ms))} if exact_ms else {}),
                "open_s": open_s,
                "open_cpu_s": open_cpu,
                "disk_mb": disk,
                **cold,
                **timed,
            }
        )
    return rows


def encoder_variants(reps: int) -> list[dict[str, Any]]:
    """p50 wall and CPU per question of each way to run the query encoder, interleaved round
    by round so every variant sees the same machine load."""
    import torch
    from parallel_rag.backends.encoders.embeddings import load_embeddings

    shipped = load_embeddings().inner  # the ONNX wrapper when onnxruntime is installed
    langchain = getattr(shipped, "inner", shipped)  # HuggingFaceEmbeddings on torch
    st = langchain._client
    bert = st[0].auto_model

    def bare(text: str) -> list[float]:
        with torch.inference_mode():
            batch = st.tokenizer([text], truncation=True, max_length=256, return_tensors="pt")
            out = bert(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
            pooled = torch.nn.functional.normalize((out * mask).sum(1) / mask.sum(1), dim=-1)
        return pooled[0].tolist()

    def direct(text: str) -> list[float]:
        return st.encode(text, normalize_embeddings=True, show_progress_bar=False).tolist()

    variants = {
        "torch, langchain_huggingface, 2 threads (torch default here)": (2, langchain.embed_query),
        "torch, langchain_huggingface, 1 thread (the earlier rows)": (1, langchain.embed_query),
        "torch, SentenceTransformer.encode directly, 1 thread": (1, direct),
        "torch, bare forward under torch.inference_mode, 1 thread": (1, bare),
    }
    if shipped is not langchain:
        variants["ONNX Runtime, 1 thread (shipped: backends/encoders/onnx_query.py)"] = (
            1,
            shipped.embed_query,
        )
    reference = {q: np.asarray(langchain.embed_query(q)) for q in QUESTIONS}
    found = {name: {"wall": [], "cpu": [], "cosine": []} for name in variants}
    for threads, run in variants.values():
        torch.set_num_threads(threads)
        run("warm up")
    for i in range(reps):
        for name, (threads, run) in variants.items():
            torch.set_num_threads(threads)
            question = QUESTIONS[i % len(QUESTIONS)]
            wall, cpu = time.perf_counter(), time.process_time()
            run(f"{question} ({i})")
            found[name]["wall"].append((time.perf_counter() - wall) * 1000)
            found[name]["cpu"].append((time.process_time() - cpu) * 1000)
            if i < len(QUESTIONS):
                found[name]["cosine"].append(float(np.asarray(run(question)) @ reference[question]))
    return [
        {
            "variant": name,
            "threads": variants[name][0],
            "wall_ms": summary_ms(d["wall"]),
            "cpu_ms": summary_ms(d["cpu"]),
            "min_cosine": min(d["cosine"]),
        }
        for name, d in found.items()
    ]


# ---------------------------------------------------------------------------------------- report


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in (
        "torch",
        "sentence-transformers",
        "onnxruntime",
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


def params(r: dict[str, Any]) -> str:
    if r.get("m") is None:
        return "-"
    build = f"{r['m']} / {r['ef_construct']}"
    if r.get("sentence_ef_construct", r["ef_construct"]) != r["ef_construct"]:
        build += f" (sentences {r['sentence_ef_construct']})"
    search = f"{r.get('hnsw_ef') or '-'}"
    if r.get("candidates"):
        search += f" (candidates {r['candidates']})"
    if r.get("quantization"):
        search += " on 8-bit copies" if r["quantization"] == "int8" else " on stored vectors"
    return f"{build} / {search}"


def row_key(r: dict[str, Any]) -> tuple:
    sentence_build = r.get("sentence_ef_construct", r.get("ef_construct"))
    return (
        r["store"],
        r["n"],
        r.get("m"),
        r.get("ef_construct"),
        sentence_build,
        r.get("hnsw_ef"),
        r.get("candidates"),
        r.get("quantization"),
        r.get("writes", 1),
    )


def store_label(r: dict[str, Any]) -> str:
    if r.get("sentences"):
        return f"edge + {r['sentences']} sentences/chunk, k {r.get('k', SENTENCE_K)}"
    return r["store"]


def store_order(store: str) -> int:
    """Report order: the sentence-weighted edge rows right after the plain edge rows."""
    return 0 if store == SENTENCES_STORE else STORES.index(store) if store in STORES else 9


def fmt_row(r: dict[str, Any], run: int | str = "") -> str:
    if "error" in r:
        return f"| {store_label(r)} | {r['n']:,} | {params(r)} | error: {r['error'][:120]} " + (
            "| " * 8 + f"| {run} |"
        )
    search = f"{r['search_ms']['p50']:.2f}"
    if "search_cpu_ms" in r:
        search += f" / {r['search_cpu_ms']['p50']:.2f}"
    if "first_pass_search_ms" in r:  # the process's first queries, before the timed ones
        search += f" (first pass {r['first_pass_search_ms']['p50']:.1f})"
    if r.get("reused"):  # queried an earlier run's kept build: no write measured
        upsert = build = "(kept build, not measured)"
    else:
        build = f"{r['build_s']:.1f} s ({r['build_cpu_s']:.1f} s CPU)"
        upsert = f"{r['upsert_per_s']:,.0f} ({r['upsert_cpu_s']:.1f} s CPU)"
        if r.get("sentences"):  # write_chunks calls: points (passages + sentences) and index
            writes = r.get("writes", 1)
            upsert = f"{r['upsert_per_s']:,.0f} points/s, " + (
                "one write" if writes == 1 else f"{writes} writes"
            )
            build = f"{build} write_chunks, both shards"
    if r.get("segments"):  # segments searched: passage shard + sentence shard
        build += f"; segments {r['segments'][0]} + {r['segments'][1]}"
    if "open_s" in r:  # the store read in by warm_up, before the first query
        build += f"; opened by warm_up in {r['open_s']:.1f} s ({r['open_cpu_s']:.1f} s CPU)"
    return (
        f"| {store_label(r)} | {r['n']:,} | {params(r)} "
        f"| {r['query_ms']['p50']:.1f} / {r['query_ms']['p95']:.1f} "
        f"| {r['query_cpu_ms']['p50']:.1f} "
        f"| {r['encode_ms']['p50']:.1f} ({r.get('encoder', 'torch')}) "
        f"| {search} "
        f"| {r['recall_at_10']:.3f} "
        f"| {upsert} "
        f"| {build} "
        f"| {r['peak_rss_mb']:,.0f} / {r['disk_mb']:,.0f} | {run} |"
    )


HEADER = (
    "| store | vectors | m / ef_construct / hnsw_ef | query p50 / p95 ms (encode + search, wall) "
    "| query CPU p50 ms | encode alone p50 ms | search alone p50 ms (wall / CPU; first pass) "
    "| recall@10 "
    "| upsert vectors/s | index build | peak RSS / disk MB | run |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def encoder_table(encoders: dict[str, Any] | None) -> list[str]:
    if not encoders:
        return []
    run = encoders["run"]
    return [
        "## Query encoder",
        "",
        f"`{run['command']}` ({run['date']}; load {run['load']}): the bundled all-MiniLM-L6-v2 "
        f"embedding one question, {encoders['rows'][0]['wall_ms']['n']} questions per variant, "
        "interleaved. CPU is the process's (all threads); cosine is the lowest over the "
        "questions against the langchain/torch vector.",
        "",
        "| variant | wall p50 / p95 ms | CPU p50 ms | min cosine vs torch |",
        "|---|---|---|---|",
        *[
            f"| {r['variant']} | {r['wall_ms']['p50']:.1f} / {r['wall_ms']['p95']:.1f} "
            f"| {r['cpu_ms']['p50']:.1f} | {r['min_cosine']:.7f} |"
            for r in encoders["rows"]
        ],
        "",
    ]


def write_report(
    rows: list[dict[str, Any]], path: Path, encoders: dict[str, Any] | None = None
) -> str:
    runs: list[dict[str, str]] = []
    for r in sorted(rows, key=lambda r: r.get("run", {}).get("date", "")):
        if r.get("run") and r["run"] not in runs:
            runs.append(r["run"])
    lines = [
        "# Embedded dense stores at 100k+ vectors",
        "",
        f"Machine: {os.cpu_count()} cores shared with other jobs (wall times vary with their "
        "load; the CPU columns do not). Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions().items())
        + ". Each (store, size, build settings) runs in its own process, under `nice -n 10`.",
        "",
        f"Data: {CLUSTERS} random unit cluster centres in {DIM}-d, each vector a centre plus "
        f"N(0, {NOISE}) per dimension, normalised; queries drawn the same way. Query time is the "
        "bundled all-MiniLM-L6-v2 encoding a question plus the store's top-10 search; recall@10 "
        "is against exact numpy search over the same vectors. Upsert excludes encoding, "
        f"batches of {BATCH} with a small payload (tenant, file_id); index build is what runs "
        "after the upserts before the store answers at full speed (Qdrant Edge `optimize()`, "
        "FAISS writing its index file, Milvus flush + load). `hnsw_ef` is the search beam "
        "(FAISS `efSearch`): rows of one build that differ only in it share the build columns.",
        "",
        "Bars: query p50 <= 25 ms at 100k and <= 60 ms at 1M, recall@10 >= 0.95, upsert >= "
        "2,000 vectors/s.",
        "",
        "`edge + N sentences/chunk` rows (`--sentences N`) are the product's embedded default "
        "dense branch: a Qdrant Edge collection written by "
        "`backends.qdrant_edge_writes.write_chunks` "
        "with passages on and `sentence_weight` 0.5 (each chunk's vector in the passage shard, "
        f"its N sentences, the chunk vector plus N(0, {SENTENCE_NOISE}) per dimension, "
        "normalised, in the sentence shard; vectors handed to the write path instead of a "
        "model) and queried through `QdrantEdgeRetriever` at k 20 with the product's "
        "`hnsw_ef`; search alone is the retriever's whole call (passage search, sentence search, "
        "exact scoring of the candidates one search missed, documents); recall@10 is its top "
        "10 against the exact mixed score (0.5 x chunk + 0.5 x best sentence) over all chunks "
        "in numpy. Their upsert and build columns are the one `write_chunks` call (points "
        'built, upserted into both shards, both indexes built). "First pass" is the p50 of '
        "as many queries (chunk vectors) run first in the process, before the timed ones: "
        'queries reading parts of the store no earlier query of the process read. "On 8-bit '
        'copies" searches the in-memory int8 copies and rescores the hits with the stored '
        'vectors (the product\'s default, `quantization: int8`); "on stored vectors" searches '
        "the same build's 32-bit vectors alone (`quantization: null`).",
        "",
        "Runs (load average at start, 1 / 5 / 15 min):",
        "",
        *[
            f"{i}. `{run['command']}` ({run.get('date', 'date not recorded')}; load {run['load']})"
            for i, run in enumerate(runs, 1)
        ],
        "",
        HEADER,
        *[fmt_row(r, runs.index(r["run"]) + 1 if r.get("run") in runs else "") for r in rows],
        "",
    ]
    seen = set()
    for r in rows:
        if r.get("sentences") and "exact_numpy_ms_p50" in r:
            if (r["n"], r["sentences"]) in seen:
                continue  # one build queried at several beams: one exact figure
            seen.add((r["n"], r["sentences"]))
            lines.append(
                f"- exact numpy mixed score over {r['n']:,} chunks and "
                f"{r['n'] * r['sentences']:,} sentences (one query, no encode): "
                f"{r['exact_numpy_ms_p50']:.1f} ms p50"
            )
        elif "exact_numpy_ms_p50" in r and r["n"] not in seen:
            seen.add(r["n"])
            lines.append(
                f"- exact numpy search over {r['n']:,} vectors (one query, no encode): "
                f"{r['exact_numpy_ms_p50']:.1f} ms p50"
            )
    lines += ["", *encoder_table(encoders)]
    text = "\n".join(lines).rstrip() + "\n"
    kept = ""
    if path.is_file():  # the hand-written findings below the table survive a re-run
        previous = path.read_text(encoding="utf-8")
        if FINDINGS in previous:
            kept = "\n" + previous[previous.index(FINDINGS) :]
    path.write_text(text + kept, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--hnsw-ef", default="128", help="search beams to query each build at, e.g. 128,256,512"
    )
    parser.add_argument("--m", type=int, default=16, help="HNSW links per node (build)")
    parser.add_argument(
        "--ef-construct",
        type=int,
        help="HNSW build beam (default 100; the sentence-weighted row: the product's default "
        "for its passage shard)",
    )
    parser.add_argument(
        "--sentence-ef-construct",
        type=int,
        help="HNSW build beam of the sentence-weighted row's sentence shard (default: the "
        "product's)",
    )
    parser.add_argument(
        "--candidates",
        help="the sentence-weighted row's chunks proposed per result wanted to query one build "
        "at, e.g. 4,8,16 (the product's always included)",
    )
    parser.add_argument(
        "--quantization",
        help="the sentence-weighted row's ways to search one build: int8 (8-bit copies, "
        "rescored: the product's default), none (the stored vectors), or int8,none",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave each built store under --work when done"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="query the sentence-weighted store a --keep run left under --work, not building it",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--work", default="/tmp/parallel-rag-ann")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "ANN-RESULTS.md"))
    parser.add_argument("--merge", action="store_true", help="keep rows of earlier runs")
    parser.add_argument(
        "--encoders", type=int, default=0, help="measure query-encoder variants (questions each)"
    )
    parser.add_argument(
        "--sentences",
        type=int,
        default=0,
        help="also build the product's sentence-weighted Qdrant Edge store, N sentences a chunk",
    )
    parser.add_argument(
        "--writes",
        type=int,
        default=1,
        help="load the sentence-weighted store in this many write_chunks calls, as ingest "
        "writes in batches (one write makes one segment per shard whatever the cap)",
    )
    parser.add_argument("--worker", nargs=2, metavar=("STORE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    efs = [int(e) for e in args.hnsw_ef.split(",")]
    one_vector_build = args.ef_construct or ONE_VECTOR_EF_CONSTRUCT
    if args.worker and args.worker[0] == "encoders":
        emit({"rows": encoder_variants(int(args.worker[1]))})
        return
    if args.worker:
        store, n = args.worker[0], int(args.worker[1])
        work = Path(args.work) / f"{store}-{n}"
        if store == SENTENCES_STORE:
            rows = run_sentences(
                n,
                args.sentences,
                args.queries,
                work,
                efs,
                args.m,
                args.ef_construct,
                args.sentence_ef_construct,
                [int(c) for c in args.candidates.split(",")] if args.candidates else None,
                args.reuse,
                args.quantization.split(",") if args.quantization else None,
                args.writes,
            )
            emit({"rows": rows})
            return
        emit({"rows": run_one(store, n, args.queries, work, efs, args.m, one_vector_build)})
        return
    run = {
        "command": (
            "python -m bench.ann_stores " + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    raw = REPO_ROOT / "bench" / "out" / "ann_stores.json"  # every row so far, for --merge
    raw.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(raw.read_text()) if args.merge and raw.exists() else []
    encoders_raw = raw.with_name("ann_encoders.json")
    encoders = json.loads(encoders_raw.read_text()) if encoders_raw.exists() else None
    if args.encoders:
        command = [sys.executable, "-m", "bench.ann_stores", "--worker", "encoders"]
        done = subprocess.run(
            [*command, str(args.encoders)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        for line in done.stdout.splitlines():
            if line.startswith("BENCH-RESULT "):
                encoders = {"run": run, "rows": json.loads(line.split(" ", 1)[1])["rows"]}
                encoders_raw.write_text(json.dumps(encoders, indent=1))
        if encoders is None or encoders["run"] is not run:
            sys.exit(f"encoder run failed: {done.stderr.strip()[-400:]}")
        print("\n".join(encoder_table(encoders)))
        if not args.merge:
            return
    for n in [int(s) for s in args.sizes.split(",")] if not args.encoders else []:
        stores = [s for s in args.stores.split(",") if s]
        for store in stores + ([SENTENCES_STORE] if args.sentences else []):
            print(f"[ann] {store} at {n:,} vectors ...", flush=True)
            command = [sys.executable, "-m", "bench.ann_stores", "--worker", store, str(n)]
            command += ["--queries", str(args.queries), "--work", args.work]
            command += ["--hnsw-ef", args.hnsw_ef, "--m", str(args.m)]
            for flag, value in (
                ("--ef-construct", args.ef_construct),
                ("--sentence-ef-construct", args.sentence_ef_construct),
                ("--candidates", args.candidates),
                ("--quantization", args.quantization),
            ):
                command += [flag, str(value)] if value is not None else []
            command += ["--sentences", str(args.sentences), "--writes", str(args.writes)]
            command += ["--reuse"] if args.reuse else []
            hnsw = store in HNSW_STORES
            sentences = {"sentences": args.sentences} if store == SENTENCES_STORE else {}
            try:
                done = subprocess.run(
                    command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=args.timeout
                )
                results = next(
                    (
                        json.loads(line.split(" ", 1)[1])["rows"]
                        for line in done.stdout.splitlines()
                        if line.startswith("BENCH-RESULT ")
                    ),
                    None,
                ) or [{"error": (done.stderr.strip().splitlines() or ["no result"])[-1]}]
            except subprocess.TimeoutExpired:
                results = [{"error": f"timed out after {args.timeout:.0f}s"}]
            for result in results:
                result.update(sentences)
                result.setdefault("store", store)
                result.setdefault("n", n)
                result.setdefault("m", args.m if hnsw else None)
                result.setdefault("ef_construct", one_vector_build if hnsw else None)
                result.setdefault("hnsw_ef", efs[0] if hnsw and "error" in result else None)
                result["run"] = run
                rows = [r for r in rows if row_key(r) != row_key(result)] + [result]
                print(fmt_row(result), flush=True)
            if not args.keep:
                shutil.rmtree(Path(args.work) / f"{store}-{n}", ignore_errors=True)
            raw.write_text(json.dumps(rows, indent=1))
    rows.sort(
        key=lambda r: (
            r["n"],
            store_order(r["store"]),
            r.get("m") or 0,
            r.get("ef_construct") or 0,
            r.get("hnsw_ef") or 0,
            r.get("candidates") or 0,
        )
    )
    print(write_report(rows, Path(args.out), encoders))


if __name__ == "__main__":
    main()
