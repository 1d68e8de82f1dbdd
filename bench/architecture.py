"""Retrieval quality at the shipped defaults, for comparing two versions of the product:
``python -m bench.architecture --out FILE.json``.

Issue 33 (one retrieval graph, runtime context, the router package) promised behaviour
unchanged: this measures the fused graph with no settings (the embedded defaults' BM25 + Qdrant
Edge over passages, the default ``fusion``) on SciFact test (nDCG@10, R@100), HotpotQA dev500
questions 101-500 (R@10, AllSupport@10/@20, answer-in-top-10) and Vaswani (nDCG@10, R@100),
retrieval only (the retrieval path ``studio.evaluation.run_graph`` runs; no answer).

The bench code is this file and the helpers beside it; the product is whatever
``parallel_rag`` imports, so running it twice with ``PYTHONPATH`` pointing at two checkouts'
import shims compares the two products under the same measurement (bench/ARCHITECTURE-RESULTS.md
gives the commands). Indexes are built by the product under test (``--work``, one folder per
checkout); vectors come from the embedding cache (``--cache``), shared by both runs, so the
second run does not encode again and both read identical vectors.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.data import doc_text, load_hotpotqa, load_scifact, load_vaswani
from bench.embedding_cache import EmbeddingCache, installed, warm
from bench.pipelines import build_edge_indexes, edge_reads_the_cache, passages_by_default, pipeline
from bench.scoring import hotpot_metrics, scifact_measures
from bench.tables import cell, markdown_table

DEPTH = 100
HOTPOT_TUNE = 100  # the questions tuning may read (bench/quality.py); reported from 101 on
COLLECTIONS = ("scifact", "hotpotqa", "vaswani")


def log(message: str) -> None:
    print(message, flush=True)


def product_commit() -> str:
    """The commit of the checkout ``parallel_rag`` is imported from (and whether it is dirty)."""
    import parallel_rag.graph

    where = Path(parallel_rag.graph.__path__[0]).resolve().parent
    git = ["git", "-C", str(where)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], text=True, capture_output=True
    )
    return commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def collection(name: str) -> tuple[dict, dict[str, str], Any]:
    """(corpus, the queries reported on, how a run is scored) of one collection."""
    if name == "hotpotqa":
        data = load_hotpotqa()
        _, report_set = data.split(HOTPOT_TUNE)
        queries = {q["_id"]: q["question"] for q in report_set}
        return data.corpus, queries, lambda runs: hotpot_metrics(runs, report_set, data.corpus)
    loaded = load_scifact("test") if name == "scifact" else load_vaswani()
    return loaded.corpus, loaded.queries, lambda runs: scifact_measures(runs, loaded.qrels)


def measure(name: str, cache: EmbeddingCache, work: Path) -> dict[str, Any]:
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.evaluation import run_graph

    corpus, queries, score = collection(name)
    warm(cache, list(queries.values()), f"{name} queries", log)
    warm(cache, [doc_text(d) for d in corpus.values()], f"{name} corpus", log)
    folder = work / name
    build_edge_indexes(corpus, folder, name, DEPTH, passages=passages_by_default())
    graph = build_graph(parse_config(pipeline(folder, name, depth=DEPTH)), base_dir=folder)
    run_graph(graph, dict(list(queries.items())[:2]), DEPTH)  # loads: not timed
    wall, cpu = time.perf_counter(), time.process_time()
    runs = run_graph(graph, queries, DEPTH)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    figures = score(runs)
    log(f"[{name}] " + " ".join(f"{m}={v:.4f}" for m, v in figures.items()))
    return {
        "queries": len(queries),
        "docs": len(corpus),
        "figures": figures,
        "run_wall_s": wall,
        "run_cpu_s": cpu,
        "top10": {qid: ids[:10] for qid, ids in runs.items()},
    }


def table(files: list[str]) -> str:
    """One row per (collection, results file): the figures, whether the top 10 of every query
    is the same as the first file's, the graph's wall and CPU time over the queries, the load
    average at the start and the run's date and product commit."""
    runs = [json.loads(Path(f).read_text()) for f in files]
    rows = []
    for name in COLLECTIONS:
        present = [r for r in runs if name in r["collections"]]
        if not present:
            continue
        first = present[0]["collections"][name]["top10"]
        for run in present:
            result = run["collections"][name]
            figures = {m: v for m, v in result["figures"].items() if m != "answerable"}
            same = sum(first.get(q) == ids for q, ids in result["top10"].items())
            rows.append(
                [
                    f"{name} ({result['queries']} queries)",
                    run["product"],
                    ", ".join(f"{m} {cell(v, 4)}" for m, v in figures.items()),
                    f"{same}/{len(result['top10'])}",
                    f"{result['run_wall_s']:.1f} / {result['run_cpu_s']:.1f}",
                    f"{run['load_at_start'][0]:.1f}",
                    run["date"],
                ]
            )
    headers = [
        "collection",
        "product",
        "figures",
        "same top 10 as the first row",
        "graph wall / CPU s",
        "load",
        "date",
    ]
    return markdown_table(headers, rows, align="lllrrrl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="results JSON")
    parser.add_argument("--work", help="index folder (one per checkout)")
    parser.add_argument("--cache", help="embedding cache folder (shared)")
    parser.add_argument("--collections", default=",".join(COLLECTIONS))
    parser.add_argument(
        "--table", nargs="+", metavar="JSON", help="print the table of these results instead"
    )
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if not (args.out and args.work and args.cache):
        parser.error("--out, --work and --cache are required to measure")
    started, cpu = time.perf_counter(), time.process_time()
    load_start = os.getloadavg()
    cache = EmbeddingCache(Path(args.cache))
    results: dict[str, Any] = {
        "command": "python -m bench.architecture " + " ".join(argv or sys.argv[1:]),
        "product": product_commit(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_at_start": load_start,
        "collections": {},
    }
    with installed(cache) as cached, edge_reads_the_cache(cached):
        for name in args.collections.split(","):
            results["collections"][name] = measure(name, cache, Path(args.work))
    results["load_at_end"] = os.getloadavg()
    results["wall_s"] = time.perf_counter() - started
    results["cpu_s"] = time.process_time() - cpu
    Path(args.out).write_text(json.dumps(results, indent=1))
    log(f"done in {results['wall_s'] / 60:.1f} min wall, {results['cpu_s'] / 60:.1f} min CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
