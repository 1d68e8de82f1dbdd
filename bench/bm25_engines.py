"""Benchmark the BM25 backend on SciFact (not a test). The harness (``python -m bench``) runs
both parts as its "BM25 engines" and "Scale: BM25" sections; this script stays as a quick
standalone check of the engines alone.

1. Quality: nDCG@10 on the SciFact test split (qrels/test.tsv, 300 queries) for the English
   Snowball analyzer vs the plain ``\\w+`` analyzer, on both engines (rankings should match).
2. Speed: index build time and single-thread query latency (analysis + scoring + top-10)
   of both engines on a synthetic corpus (default 100k documents) made by replicating
   SciFact documents with random word drops and substitutions.

Usage::

    python bench/bm25_engines.py [--data ../shared/data/scifact] [--docs 100000]

Prints markdown tables. Takes a few minutes on two cores (mostly building the 100k indexes
and rank-bm25's per-query scan).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import nDCG
from parallel_rag.backends.bm25 import ENGINES, BM25Index

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "scifact"
ANALYZERS = ("english", "plain")
NDCG10 = nDCG @ 10


def load_scifact(data: Path):
    needed = [data / "corpus.jsonl", data / "queries.jsonl", data / "qrels" / "test.tsv"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        sys.exit(
            f"SciFact not found under {data} (missing: {', '.join(missing)}).\n"
            "Put the BEIR SciFact files there (corpus.jsonl, queries.jsonl, qrels/test.tsv) "
            "or pass --data DIR."
        )
    corpus = []
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            text = f"{doc.get('title', '')} {doc.get('text', '')}".strip()
            corpus.append((str(doc["_id"]), text, {}))
    qrels = []
    with open(data / "qrels" / "test.tsv", encoding="utf-8") as f:
        next(f)  # header: query-id, corpus-id, score
        for line in f:
            qid, did, rel = line.rstrip("\n").split("\t")
            qrels.append(ir_measures.Qrel(qid, did, int(rel)))
    test_ids = {q.query_id for q in qrels}
    queries = {}
    with open(data / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            if str(q["_id"]) in test_ids:
                queries[str(q["_id"])] = q["text"]
    return corpus, queries, qrels


def ndcg_at_10(index: BM25Index, queries: dict[str, str], qrels) -> float:
    run = [
        ir_measures.ScoredDoc(qid, hit.chunk.id, hit.score)
        for qid, text in queries.items()
        for hit in index.search(text, k=10)
    ]
    return ir_measures.calc_aggregate([NDCG10], qrels, run)[NDCG10]


def synthetic_corpus(corpus, n_docs: int, seed: int = 0):
    """``n_docs`` documents: SciFact docs, then perturbed copies (10% words dropped,
    5% replaced by random words from the whole corpus)."""
    rng = np.random.default_rng(seed)
    docs_words = [text.split() for _, text, _ in corpus]
    pool = [w for words in docs_words[:2000] for w in words]
    out = list(corpus[:n_docs])
    copy = 0
    while len(out) < n_docs:
        copy += 1
        for (doc_id, _, _), words in zip(corpus, docs_words, strict=True):
            if len(out) >= n_docs:
                break
            draws = rng.random(len(words))
            picks = rng.integers(0, len(pool), len(words))
            perturbed = [
                pool[p] if r < 0.05 else w
                for w, r, p in zip(words, draws.tolist(), picks.tolist(), strict=True)
                if r >= 0.15 or r < 0.05
            ]
            out.append((f"{doc_id}#{copy}", " ".join(perturbed), {}))
    return out


def latency_ms(index: BM25Index, queries: list[str], k: int = 10) -> list[float]:
    for q in queries[:5]:  # warm-up
        index.search(q, k=k)
    times = []
    for q in queries:
        start = time.perf_counter()
        index.search(q, k=k)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="SciFact directory")
    parser.add_argument("--docs", type=int, default=100_000, help="synthetic corpus size")
    parser.add_argument("--queries", type=int, default=100, help="latency queries (max 300)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    corpus, queries, qrels = load_scifact(args.data)
    print(f"SciFact: {len(corpus)} docs, {len(queries)} test queries, {len(qrels)} qrels\n")

    print("## nDCG@10, SciFact test\n")
    print("| analyzer | engine | terms | nDCG@10 |")
    print("|---|---|---:|---:|")
    for analyzer in ANALYZERS:
        index = BM25Index.from_chunks(corpus, analyzer=analyzer)
        for engine in ENGINES:
            scored = index.with_engine(engine)
            score = ndcg_at_10(scored, queries, qrels)
            print(f"| {analyzer} | {engine} | {len(index.vocabulary)} | {score:.4f} |")

    print(f"\n## Query latency, synthetic {args.docs:,}-doc corpus (english analyzer, k=10)\n")
    t0 = time.perf_counter()
    synthetic = synthetic_corpus(corpus, args.docs, args.seed)
    t_gen = time.perf_counter() - t0
    # Analysis happens once per corpus and is shared by both engines: time it apart from each
    # engine's statistics build (analysis = from_chunks(rank_bm25) - rank_bm25 stats rebuild).
    t0 = time.perf_counter()
    first = BM25Index.from_chunks(synthetic, engine="rank_bm25")
    t_first = time.perf_counter() - t0
    indexes: dict[str, BM25Index] = {}
    builds: dict[str, float] = {}
    for engine in ENGINES:
        gc.collect()
        t0 = time.perf_counter()
        indexes[engine] = first.with_engine(engine)  # rebuilds the engine stats from term ids
        builds[engine] = time.perf_counter() - t0
    del first
    n_tokens = sum(indexes["bm25s"].chunk_term_ids(i).size for i in range(len(indexes["bm25s"])))
    print(
        f"corpus generated in {t_gen:.1f}s; analysis (once, shared) "
        f"{max(t_first - builds['rank_bm25'], 0.0):.1f}s; "
        f"{len(indexes['bm25s'].vocabulary):,} terms, {n_tokens:,} tokens\n"
    )
    query_texts = list(queries.values())[: args.queries]
    print(f"{len(query_texts)} SciFact test queries, one thread, end to end `search()`.\n")
    print("| engine | stats build (s) | mean (ms) | p50 (ms) | p95 (ms) | QPS |")
    print("|---|---:|---:|---:|---:|---:|")
    for engine in ENGINES:
        gc.collect()
        times = latency_ms(indexes[engine], query_texts)
        mean = statistics.fmean(times)
        p50 = float(np.percentile(times, 50))
        p95 = float(np.percentile(times, 95))
        print(
            f"| {engine} | {builds[engine]:.1f} | {mean:.2f} | {p50:.2f} | {p95:.2f} "
            f"| {1000 / mean:.1f} |"
        )


if __name__ == "__main__":
    main()
