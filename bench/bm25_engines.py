"""Benchmark the BM25 backend on SciFact (not a test). The harness (``python -m bench``) runs
both parts as its "BM25 engines" and "Scale: BM25" sections; this script stays as a quick
standalone check of the engines alone.

1. Quality: nDCG@10 on the SciFact test split (qrels/test.tsv, 300 queries) for the English
   Snowball analyzer vs the plain ``\\w+`` analyzer, on both engines (rankings should match).
2. Speed: index build time and single-thread query latency (analysis + scoring + top-10)
   of both engines on a synthetic corpus (default 100k documents) made by replicating
   SciFact documents with random word drops and substitutions.

3. Scale (``--scale N [N ...]``, instead of 1 and 2): the default engine's index built from
   the harness's synthetic corpus (``bench.data.synthetic_corpus``, the "Scale: BM25" corpus)
   in a fresh child process per size, so the peak RSS is that build's own (corpus included):
   build wall and CPU time, peak RSS (the child's ``VmHWM`` and the parent's
   ``RUSAGE_CHILDREN`` maximum), the same after an atomic ``save``, and single-thread query
   latency (wall and CPU) on SciFact test claims.

Usage::

    python -m bench.bm25_engines [--data ../shared/data/scifact] [--docs 100000]
    python -m bench.bm25_engines --scale 100000 1000000 [--no-save]

Prints markdown tables. Parts 1 and 2 take a few minutes on two cores (mostly building the 100k
indexes and rank-bm25's per-query scan); ``--scale 1000000`` takes a few minutes more.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import nDCG
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.settings import ENGINES

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


SCALE_RESULT = "BM25-SCALE "


def _vm_hwm_mb() -> float:
    """This process's peak resident set size (``VmHWM``), in MB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _cpu_s() -> float:
    return time.process_time()


def scale_child(docs: int, queries: int, seed: int, save: bool) -> dict:
    """One build in this (fresh) process: corpus generation, ``from_chunks``, optional save,
    query latency. Memory figures are this process's own, corpus included."""
    from bench.data import doc_text, synthetic_corpus
    from bench.data import load_scifact as load_collection

    test = load_collection("test")
    texts = [doc_text(d) for d in test.corpus.values()]
    query_texts = list(test.queries.values())[:queries]
    chunks = synthetic_corpus(texts, docs, seed=seed)
    del texts, test
    gc.collect()
    result: dict = {"docs": docs, "rss_corpus_mb": _rss_mb(), "peak_before_build_mb": _vm_hwm_mb()}
    wall, cpu = time.perf_counter(), _cpu_s()
    index = BM25Index.from_chunks(chunks, engine="bm25s")
    result["build_s"] = time.perf_counter() - wall
    result["build_cpu_s"] = _cpu_s() - cpu
    gc.collect()
    result["rss_after_build_mb"] = _rss_mb()
    result["peak_build_mb"] = _vm_hwm_mb()
    result["terms"] = len(index.vocabulary)
    result["tokens"] = sum(index.chunk_term_ids(i).size for i in range(len(index)))
    if save:
        target = Path(tempfile.mkdtemp(prefix="bm25-scale-")) / "index"
        try:
            wall, cpu = time.perf_counter(), _cpu_s()
            index.save(target)
            result["save_s"] = time.perf_counter() - wall
            result["save_cpu_s"] = _cpu_s() - cpu
            result["peak_save_mb"] = _vm_hwm_mb()
        finally:
            shutil.rmtree(target.parent, ignore_errors=True)
    for q in query_texts[:5]:  # warm-up
        index.search(q, k=10)
    times, cpus = [], []
    for q in query_texts:
        wall, cpu = time.perf_counter(), _cpu_s()
        index.search(q, k=10)
        times.append((time.perf_counter() - wall) * 1000)
        cpus.append((_cpu_s() - cpu) * 1000)
    result["queries"] = len(times)
    result["p50_ms"] = float(np.percentile(times, 50))
    result["p95_ms"] = float(np.percentile(times, 95))
    result["cpu_p50_ms"] = float(np.percentile(cpus, 50))
    result["peak_mb"] = _vm_hwm_mb()
    return result


def run_scale(sizes: list[int], queries: int, seed: int, save: bool) -> None:
    """Each size in a fresh child process; prints one markdown row per size."""
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}\n")
    print(
        "| docs | terms | tokens | build wall s | build CPU s | peak RSS MB (build) "
        "| RSS MB after build (corpus alone) | save wall s | peak RSS MB (build + save) "
        "| child maxrss MB | query p50 ms | p95 ms | CPU p50 ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for docs in sizes:
        command = [
            sys.executable, "-m", "bench.bm25_engines", "--scale-child", str(docs),
            "--queries", str(queries), "--seed", str(seed),
        ]  # fmt: skip
        if not save:
            command.append("--no-save")
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith(SCALE_RESULT)), None)
        if done.returncode != 0 or line is None:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            print(f"| {docs:,} | failed: exit {done.returncode}: {tail} |")
            continue
        r = json.loads(line[len(SCALE_RESULT) :])
        child_max = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        save_s = f"{r['save_s']:.1f}" if "save_s" in r else "-"
        peak_save = f"{r['peak_save_mb']:.0f}" if "peak_save_mb" in r else "-"
        print(
            f"| {docs:,} | {r['terms']:,} | {r['tokens']:,} | {r['build_s']:.1f} "
            f"| {r['build_cpu_s']:.1f} | {r['peak_build_mb']:.0f} "
            f"| {r['rss_after_build_mb']:.0f} ({r['rss_corpus_mb']:.0f}) | {save_s} "
            f"| {peak_save} | {child_max:.0f} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} "
            f"| {r['cpu_p50_ms']:.2f} |",
            flush=True,
        )
    load = os.getloadavg()
    print(f"\nload average at end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="SciFact directory")
    parser.add_argument("--docs", type=int, default=100_000, help="synthetic corpus size")
    parser.add_argument("--queries", type=int, default=100, help="latency queries (max 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scale", type=int, nargs="+", metavar="DOCS", help="only the scale builds, one per size"
    )
    parser.add_argument("--no-save", action="store_true", help="scale: skip the timed save")
    parser.add_argument("--scale-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scale_child is not None:
        result = scale_child(args.scale_child, args.queries, args.seed, not args.no_save)
        print(SCALE_RESULT + json.dumps(result), flush=True)
        return
    if args.scale:
        run_scale(args.scale, args.queries, args.seed, not args.no_save)
        return

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
