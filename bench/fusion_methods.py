"""Fusion methods side by side: ``python -m bench.fusion_methods``.

BM25 (bm25s, english analyzer, product defaults) and dense (packaged all-MiniLM-L6-v2 in the
embedded default store, Qdrant Edge; each document one vector, or with ``passages`` several
passages scored by the best), each asked for ``--depth`` candidates, fused by every method of
``nodes/fuse.py``: RRF (k, dense weight) and the weighted sums of normalised scores (minmax,
zscore, dbsf; dense weight, lexical weight 1).

Tuning uses training data only: SciFact ``train`` (nDCG@10) and HotpotQA dev500's first 100
questions (AllSupport@10). It runs offline on the two retrievers' branch results through
``nodes.fuse.fuse_branches`` itself, so a grid point costs no retrieval. The defaults are the
single setting with the best mean of the two training objectives; ``graph/configuration.py``
ships them. Reported figures then come from the real graph (``build_graph``, per-run knobs for
the non-default rows) on the held-out queries: SciFact ``test`` and HotpotQA questions 101-500,
with each single retriever beside the fused lists and CPU time beside wall time; and on Vaswani
(all 93 queries), a collection nothing is tuned on.

Prints a table and writes ``bench/FUSION-RESULTS.md`` (``--out``). Vectors come from the bench's
embedding cache (``bench/out/cache``); indexes are built under ``bench/out/fusion``. Without the
evaluation data the script stops with exit status 2 and measures nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LANGSMITH_TRACING", "false")


from bench.data import (  # noqa: E402
    REPO_ROOT,
    DataMissing,
    data_root,
    doc_text,
    load_hotpotqa,
    load_scifact,
)
from bench.pipelines import (  # noqa: E402
    DENSE,
    LEX,
    PASSAGES_ON,
    VARIANTS,
    branch_result,
    build_edge_indexes,
    edge_reads_the_cache,
    no_fusion_settings,
    passages_by_default,
)
from bench.scoring import hotpot_measures, scifact_measures  # noqa: E402
from bench.tables import markdown_table  # noqa: E402

OUT_DIR = REPO_ROOT / "bench" / "out"
CACHE_DIR = OUT_DIR / "cache"
WORK_DIR = OUT_DIR / "fusion"
RESULTS_MD = REPO_ROOT / "bench" / "FUSION-RESULTS.md"
VASWANI = "vaswani"
RRF_K_GRID = (5, 10, 20, 60)
RRF_WEIGHT_GRID = (0.25, 0.5, 0.75, 1.0)
SCORE_WEIGHT_GRID = (0.25, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5)
SCORE_METHODS = ("minmax", "zscore", "dbsf")
HOTPOT_TUNE = 100
BARS = {"scifact": 0.73, "hotpotqa": 0.90}
EXAMPLE_FLOOR_NOTE = (
    "Example-question floor (the fused top 3 must hold the gold document of every question that "
    "only the lexical or only the dense retriever finds; tests/integration/test_end_to_end.py), "
    "measured on the example corpus with the default embedded pipeline and the fusion knobs. "
    "Before sentences (2026-11-30): minmax with w_dense 0.4, 0.5 or 0.6 loses q05 (dense-only); "
    "0.75 keeps every one; 1.0 loses q01 (lexical-only). zscore 0.5 loses q01 and q05, zscore "
    "1.0 loses q01; dbsf 0.5 loses q05, dbsf 1.0 loses q01; rrf k=60 with equal weights keeps "
    "every one, rrf w_dense 0.5 loses q05. Hence minmax, w_dense 0.75 rather than the training "
    "winner. With the dense branch scoring sentences (weight 0.5, minmax): w_dense 0.5, 0.6 and "
    "0.62 lose q05; 0.65 and 0.68 lose q01 and q05; 0.7 to 0.9 lose q01, whose lexical branch "
    "has a single hit (the one document holding 'pfordelta') that a branch whose scores do not "
    "spread counted 0.5. Counted 1 (the branch's best; nodes/fuse.py), w_dense 0.75, 0.9 and "
    "1.0 keep every question (0.5 and 0.6 still lose q05). No training query has such a "
    "branch: the training objectives are the same either way. Over the whole grid with "
    "sentences, the settings that keep every question are rrf (k 5, 10, 20, 60) with w_dense 1, "
    "minmax 0.75 and 1.0, dbsf 1.0 and 1.5; of these minmax 1.0 has the best training mean "
    "(SciFact train 0.7475, HotpotQA tune 0.77, mean 0.7588 against 0.7566 for minmax 0.75: "
    "+0.004 nDCG@10 on SciFact, a handful of 809 queries). The fusion default was not chosen "
    "again: minmax 0.75 stays, and its figure with sentences is what the tables above show."
)
STATIC_NOTES = [
    EXAMPLE_FLOOR_NOTE,
    "Passages (`passages:` on the qdrant_edge backend, on by default): all-MiniLM-L6-v2 reads "
    "256 word pieces and 3,681 of SciFact's 5,183 abstracts are longer (198 of HotpotQA's "
    "4,858 paragraphs, 4 of Vaswani's 11,429 documents). With passages each longer document is "
    "stored as windows of 256 word pieces (the model's tokenizer; the title leads each, windows "
    "cut between words, the last one ends with the text), the first keeping the document's own "
    "vector; the retriever asks the store for 4x the hits and keeps each document's best "
    "passage. Passage aggregates measured once offline on SciFact train (exact search over the "
    "cached passage vectors; dense alone / fused at minmax, w_dense 0.75): best passage 0.6776 "
    "/ 0.7371; best + 0.05 x the other passages' scores 0.6757 / 0.7336; best + 0.1 x 0.6545 / "
    "0.7298; mean of the best passage and the whole-document vector 0.6704 / 0.7358.",
    "Sentences (`passages.sentence_weight` w, default 0.5): each document's sentences (a line's "
    "sentences; headings and short title lines are not sentences) are embedded at ingest into "
    "a second shard, and a document scores (1 - w) x its best passage + w x its best sentence; "
    "the retriever searches both shards and computes the score a search missed from the stored "
    "vectors. Measured offline on the training data (exact search over cached passage and "
    "sentence vectors; SciFact train nDCG@10 / HotpotQA tune AllSupport@10; dense alone, then "
    "fused with BM25 at minmax, w_dense 0.75): w 0 (best passage) 0.6776 / 0.59, fused 0.7371 "
    "/ 0.77; w 0.3 0.6969 / 0.62, fused 0.7406 / 0.76; w 0.4 0.7032 / 0.62, fused 0.7419 / "
    "0.77; w 0.5 0.7069 / 0.62, fused 0.7431 / 0.77; w 0.6 0.7019 / 0.58, fused 0.7445 / 0.76; "
    "best sentence alone 0.6799 / 0.50, fused 0.7379 / 0.73; max(best passage, best sentence) "
    "0.6854 / 0.51, fused 0.7399 / 0.75. As a signal outside the dense branch instead: a third "
    "branch (the best-sentence ranking, weight 0.25 / 0.5 / 0.75) fused 0.7415 / 0.78, 0.7440 "
    "/ 0.76, 0.7457 / 0.75; the fused top 100 reranked by adding its best-sentence scores "
    "(weight 0.25 / 0.5 / 1.0) 0.7391 / 0.77, 0.7434 / 0.78, 0.7464 / 0.76. w 0.5 is the best "
    "dense alone on both training sets and the best fused SciFact figure that keeps HotpotQA "
    "at 0.77; it costs ingest one more embedding per sentence (50,364 on SciFact, 21,527 on "
    "HotpotQA) and the dense branch several times its time per query (the held-out tables: "
    "SciFact 68 ms wall / 109 ms CPU, HotpotQA 58 / 58, against 20 / 14 and 16 / 11 with "
    "passages alone in the run of 15:34 UTC): a second search, and the stored vectors of the "
    "candidates one search missed (about 1,300 sentences a query on SciFact) read and scored.",
    "BM25 parameters (measured offline on the training data, bm25s with the english analyzer, "
    "k1 in [0.6, 0.9, 1.2, 1.5, 2.0] x b in [0.3, 0.5, 0.75, 0.9, 1.0]): BM25 alone, SciFact "
    "train nDCG@10 ranges 0.6925-0.7013 (1.5/0.75: 0.6970; best 1.2/0.5: 0.7013) and HotpotQA "
    "tune AllSupport@10 0.70-0.79 (1.5/0.75 is the best, with 2.0/0.75). Fused with dense best "
    "passage at minmax 0.75: 1.5/0.75 0.7371 / 0.77, best 0.9/0.9 0.7390 / 0.79; fused with "
    "the shipped dense (w 0.5): 1.5/0.75 0.7431 / 0.77, 1.2/0.75 0.7460 / 0.77, 0.9/0.75 "
    "0.7453 / 0.77, 0.9/0.9 0.7438 / 0.78. The spread is 3 thousandths of nDCG@10 (a few of "
    "809 queries) and 1-2 HotpotQA questions: within noise, so k1=1.5, b=0.75 stay.",
    "Before sentences (run of 2026-11-30 15:34 UTC: the same fusion, dense by best passage "
    "alone): SciFact test nDCG@10 0.726 (dense alone 0.657), HotpotQA 101-500 AllSupport@10 "
    "0.910 (dense alone 0.770), Vaswani nDCG@10 0.491 (dense alone 0.434).",
    "Normalisation variants (offline, SciFact train nDCG@10 / HotpotQA tune AllSupport@10, "
    "BM25 + dense best passage, w_dense 0.75): min-max 0.7371 / 0.77; divided by the branch's "
    "best score only 0.7354 / 0.75; min-max from the 20th hit (lower hits 0) 0.7316 / 0.78; "
    "min-max squared 0.7357 / 0.79. Min-max stays.",
]


def log(message: str) -> None:
    print(message, flush=True)


# -- branch results -------------------------------------------------------------------------


def branch_results(
    retrievers: dict[str, Any], queries: dict[str, str], depth: int
) -> tuple[dict[str, list[dict]], dict[str, tuple[float, float]]]:
    """Per query, one ``BranchResult`` per retriever (view 0), as the retrieve node builds it;
    plus each retriever's (wall, CPU) seconds over all the queries."""
    out: dict[str, list[dict]] = {qid: [] for qid in queries}
    seconds: dict[str, tuple[float, float]] = {}
    for index, (name, retriever) in enumerate(retrievers.items()):
        wall, cpu = time.perf_counter(), time.process_time()
        for qid, text in queries.items():
            documents = retriever.invoke(text, k=depth)
            out[qid].append(branch_result(name, index, text, documents, depth))
        seconds[name] = (time.perf_counter() - wall, time.process_time() - cpu)
    return out, seconds


def doc_ids(documents: Iterable[dict]) -> list[str]:
    from parallel_rag.studio.evaluation import DOC_ID_KEY

    return [str(d["metadata"][DOC_ID_KEY]) for d in documents]


def fused_runs(
    branches: dict[str, list[dict]], method: str, k: int, weights: dict[str, float], depth: int
) -> dict[str, list[str]]:
    from parallel_rag.nodes.fuse import fuse_branches

    return {
        qid: doc_ids(fuse_branches(bs, method=method, k=k, weights=weights, top_k=depth))
        for qid, bs in branches.items()
    }


def single_runs(branches: dict[str, list[dict]], name: str) -> dict[str, list[str]]:
    return {
        qid: doc_ids(h for b in bs if b["retriever"] == name for h in b["hits"])
        for qid, bs in branches.items()
    }


def without_scores(branches: dict[str, list[dict]], name: str) -> dict[str, list[dict]]:
    """The same branches with ``name``'s scores removed (a retriever that reports none)."""
    return {
        qid: [
            {**b, "hits": [{**h, "score": None} for h in b["hits"]]}
            if b["retriever"] == name
            else b
            for b in bs
        ]
        for qid, bs in branches.items()
    }


# -- tuning -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    method: str
    k: int
    dense_weight: float

    @property
    def weights(self) -> dict[str, float]:
        return {LEX: 1.0, DENSE: self.dense_weight}

    @property
    def knobs(self) -> dict[str, Any]:
        """The run's knobs; ``fusion_k`` for rrf only (a run refuses it beside a score method,
        which keeps the graph's configured k, the default 60 here, for unscored branches)."""
        knobs = {"fusion_method": self.method, "fusion_weights": self.weights}
        return {**knobs, "fusion_k": self.k} if self.method == "rrf" else knobs

    def label(self) -> str:
        k = f", k={self.k}" if self.method == "rrf" else ""
        return f"{self.method}{k}, w_dense={self.dense_weight:g}"


def _same(a: Setting | None, b: Setting | None) -> bool:
    """The same fused order: k only matters to rrf (and to branches without scores)."""
    if a is None or b is None:
        return False
    return (a.method, a.dense_weight) == (b.method, b.dense_weight) and (
        a.method != "rrf" or a.k == b.k
    )


def grid() -> list[Setting]:
    from parallel_rag.nodes.fuse import DEFAULT_RRF_K

    settings = [Setting("rrf", k, w) for k in RRF_K_GRID for w in RRF_WEIGHT_GRID]
    settings += [Setting(m, DEFAULT_RRF_K, w) for m in SCORE_METHODS for w in SCORE_WEIGHT_GRID]
    return settings


def tune(
    objectives: dict[str, tuple[dict[str, list[dict]], Callable[[dict], float]]], depth: int
) -> list[dict[str, Any]]:
    """Every grid setting's training objective on every collection (``{name: (branches,
    objective)}``), plus their mean."""
    table = []
    for setting in grid():
        row: dict[str, Any] = {"setting": setting}
        for name, (branches, objective) in objectives.items():
            row[name] = objective(
                fused_runs(branches, setting.method, setting.k, setting.weights, depth)
            )
        row["mean"] = sum(row[name] for name in objectives) / len(objectives)
        table.append(row)
    return table


def best(table: list[dict], key: str, method: str | None = None) -> dict:
    from parallel_rag.nodes.fuse import DEFAULT_RRF_K

    rows = [r for r in table if method is None or r["setting"].method == method]
    # ties: prefer equal weights, then the k closest to RRF's usual 60
    return max(
        rows,
        key=lambda r: (
            round(r[key], 6),
            -abs(r["setting"].dense_weight - 1),
            -abs(r["setting"].k - DEFAULT_RRF_K),
        ),
    )


def record_other_tuning(
    results: dict[str, Any],
    sci_branches: dict[str, list[dict]],
    hot_branches: dict[str, list[dict]],
    sci_objective: Callable[[dict], float],
    hot_objective: Callable[[dict], float],
    shipped_setting: Setting,
    previous: Setting,
    passages: bool,
    depth: int,
) -> None:
    """The grid again with the other dense variant's branches: its picks and its dense alone."""
    table = tune(
        {"scifact": (sci_branches, sci_objective), "hotpotqa": (hot_branches, hot_objective)},
        depth,
    )
    picks = [("training winner (best mean)", best(table, "mean"))]
    shipped_row = next((r for r in table if _same(r["setting"], shipped_setting)), None)
    if shipped_row is not None:
        picks.append(("shipped default", shipped_row))
    for name in ("scifact", "hotpotqa"):
        picks.append((f"best on {name}", best(table, name)))
    picks.append(("previous default", next(r for r in table if r["setting"] == previous)))
    for why, row in picks:
        log(
            f"[tune] dense {VARIANTS[passages]}: {why}: {row['setting'].label()} "
            f"scifact={row['scifact']:.4f} hotpotqa={row['hotpotqa']:.4f} mean={row['mean']:.4f}"
        )
    results["tuning"]["other"] = {
        "variant": VARIANTS[passages],
        "rows": [
            {
                "why": why,
                "label": r["setting"].label(),
                **{k: r[k] for k in ("scifact", "hotpotqa", "mean")},
            }
            for why, r in picks
        ],
        "singles": {
            DENSE: {
                "SciFact train nDCG@10": sci_objective(single_runs(sci_branches, DENSE)),
                "HotpotQA tune AllSupport@10": hot_objective(single_runs(hot_branches, DENSE)),
            }
        },
    }


# -- the graph on held-out queries -------------------------------------------------------------


def graph_runs(
    graph, queries: dict[str, str], depth: int, knobs: dict[str, Any] | None, batch: int = 8
) -> tuple[dict[str, list[str]], float, float]:
    """Fused document ids per query through ``graph.batch`` (``knobs`` as ``configurable``),
    with the wall and CPU seconds spent."""
    config = {"configurable": dict(knobs)} if knobs else None
    qids = list(queries)
    runs: dict[str, list[str]] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(qids), batch):
        chunk = qids[start : start + batch]
        results = graph.batch([{"query": queries[q], "top_k": depth} for q in chunk], config)
        for qid, result in zip(chunk, results, strict=True):
            runs[qid] = doc_ids(result["documents"])
    return runs, time.perf_counter() - wall, time.process_time() - cpu


def report_rows(
    name: str,
    config: dict[str, Any],
    other: dict[str, Any] | None,
    work: Path,
    queries: dict[str, str],
    measure: Callable[[dict], dict[str, float]],
    settings: list[tuple[str, Setting | None, bool]],
    depth: int,
) -> list[dict[str, Any]]:
    """Singles and fused rows on held-out queries. A fused row runs the real graph (``True``,
    timed end to end) or fuses the singles' branch results offline with ``fuse_branches``
    (``False``: the same fused list; its time is the fusion step alone). ``other`` is the same
    pipeline with the other dense variant (passages on when the default is off, and the
    reverse): its dense retriever alone and its graph at the default fusion get a row each."""
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.evaluation import single_retrievers

    shipped = passages_by_default()
    parsed = parse_config(config)
    other_parsed = parse_config(other) if other is not None else None
    rows = []
    n = len(queries)
    branches, seconds = branch_results(single_retrievers(parsed, work), queries, depth)
    variant = {shipped: (branches, seconds[DENSE])}
    if other_parsed is not None:
        other_dense = {DENSE: single_retrievers(other_parsed, work)[DENSE]}
        other_branches, other_seconds = branch_results(other_dense, queries, depth)
        variant[not shipped] = (other_branches, other_seconds[DENSE])
    singles = [("BM25 alone", branches, *seconds[LEX], LEX)] + [
        (f"dense alone (MiniLM, {VARIANTS[on]})", variant[on][0], *variant[on][1], DENSE)
        for on in (False, True)
        if on in variant
    ]
    for label, source, wall, cpu, retriever_name in singles:
        rows.append(
            _row(label, "single", measure(single_runs(source, retriever_name)), wall, cpu, n)
        )
        log(f"[{name}] {_fmt(rows[-1])}")
    graph = build_graph(parsed, base_dir=work)
    for label, setting, through_graph in settings:
        if through_graph:
            knobs = setting.knobs if setting else None
            runs, wall, cpu = graph_runs(graph, queries, depth, knobs)
            kind = "fused"
        else:
            wall, cpu = time.perf_counter(), time.process_time()
            runs = fused_runs(branches, setting.method, setting.k, setting.weights, depth)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            kind, label = "fused-offline", f"{label} [offline; fusion time only]"
        rows.append(_row(label, kind, measure(runs), wall, cpu, n))
        log(f"[{name}] {_fmt(rows[-1])}")
        if through_graph and setting is None and other_parsed is not None:
            # the default fusion over the other dense variant
            other_graph = build_graph(other_parsed, base_dir=work)
            runs, wall, cpu = graph_runs(other_graph, queries, depth, None)
            label = f"default fusion, dense with {VARIANTS[not shipped]}"
            rows.append(_row(label, "fused-variant", measure(runs), wall, cpu, n))
            log(f"[{name}] {_fmt(rows[-1])}")
    return rows


def doc_ids_of(documents) -> list[str]:
    from parallel_rag.studio.evaluation import ranked_doc_ids

    return ranked_doc_ids(documents)


def _row(label, kind, figures, wall, cpu, n) -> dict[str, Any]:
    return {
        "config": label,
        "kind": kind,
        **figures,
        "wall_ms_per_query": 1000 * wall / max(n, 1),
        "cpu_ms_per_query": 1000 * cpu / max(n, 1),
    }


def _fmt(row: dict[str, Any]) -> str:
    figures = " ".join(f"{k}={v:.4f}" for k, v in row.items() if "@" in k)
    return (
        f"{row['config']}: {figures} wall={row['wall_ms_per_query']:.1f}ms "
        f"cpu={row['cpu_ms_per_query']:.1f}ms per query"
    )


# -- rendering ---------------------------------------------------------------------------------


def result_table(rows: list[dict[str, Any]], measures: list[str]) -> str:
    body = [
        [r["config"], *(f"{r[m]:.3f}" for m in measures)]
        + [f"{r['wall_ms_per_query']:.1f}", f"{r['cpu_ms_per_query']:.1f}"]
        for r in rows
    ]
    return markdown_table(["configuration", *measures, "wall ms/query", "CPU ms/query"], body)


def bar_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, measure, other in (
        ("scifact", "nDCG@10", "R@100"),
        ("hotpotqa", "AllSupport@10", "R@100"),
        (VASWANI, "nDCG@10", "R@100"),
    ):
        if name not in results:
            continue
        rows = results[name]["rows"]
        default = next(
            r for r in rows if r["kind"] == "fused" and r["config"].startswith("defaults")
        )
        singles = [r for r in rows if r["kind"] == "single"]
        beats = all(default[m] >= s[m] for s in singles for m in (measure, other))
        bar = (
            f"(bar {BARS[name]:.2f}: {'met' if default[measure] >= BARS[name] else 'NOT met'})"
            if name in BARS
            else "(no bar)"
        )
        lines.append(
            f"- {results[name]['title']} {measure} at the defaults: {default[measure]:.3f} "
            f"{bar}; fused >= every single retriever (every dense variant above) on {measure} and "
            f"{other}: {'yes' if beats else 'NO'}"
        )
    return lines


def tuning_table(rows: list[dict[str, Any]]) -> str:
    """One row per training setting: both objectives and their mean."""
    return markdown_table(
        ["setting", "SciFact train nDCG@10", "HotpotQA tune AllSupport@10", "mean"],
        [
            [
                r["why"] + ": " + r["label"],
                f"{r['scifact']:.4f}",
                f"{r['hotpotqa']:.4f}",
                f"{r['mean']:.4f}",
            ]
            for r in rows
        ],
    )


def other_tuning(other: dict[str, Any]) -> list[str]:
    """The same grid with the other dense variant, its picks only."""
    figures = other["singles"][DENSE]
    return [
        f"With dense {other['variant']} instead (same grid, same lexical branch):",
        "",
        tuning_table(other["rows"]),
        "",
        f"Dense {other['variant']} alone on the training queries: "
        + ", ".join(f"{k} {v:.4f}" for k, v in figures.items())
        + ".",
        "",
    ]


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = [f"Python {platform.python_version()}"]
    for name in ("qdrant-edge-py", "sentence-transformers", "transformers", "torch", "bm25s"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    return ", ".join(found)


def variant_note(results: dict[str, Any]) -> list[str]:
    """Which dense variant ships, and how the other one did at the shipped fusion defaults on
    the training data (where the choice is made) and on the held-out sets."""
    tuned = results["tuning"]
    other = tuned.get("other")
    if not other:
        return []

    def shipped_row(rows):
        return next((r for r in rows if r["why"] == "shipped default"), None)

    mine, theirs = shipped_row(tuned["rows"]), shipped_row(other["rows"])
    if mine is None or theirs is None:
        return []
    held = []
    for name, measure in (
        ("scifact", "nDCG@10"),
        ("hotpotqa", "AllSupport@10"),
        (VASWANI, "nDCG@10"),
    ):
        rows = results.get(name, {}).get("rows", [])
        default = next((r for r in rows if r["config"].startswith("defaults")), None)
        variant = next((r for r in rows if r["kind"] == "fused-variant"), None)
        if default and variant:
            held.append(f"{name} {measure} {variant[measure]:.3f} vs {default[measure]:.3f}")
    return [
        f"Dense variant: the shipped default is {tuned['variant']}. At the shipped fusion "
        f"defaults, dense with {other['variant']} gives SciFact train nDCG@10 "
        f"{theirs['scifact']:.4f} vs {mine['scifact']:.4f} and HotpotQA tune AllSupport@10 "
        f"{theirs['hotpotqa']:.4f} vs {mine['hotpotqa']:.4f} (training); held out: "
        + "; ".join(held)
        + "."
    ]


def render(results: dict[str, Any]) -> str:
    tuned = results["tuning"]
    out = [
        "# Fusion methods",
        "",
        f"Written by `{results['command']}` on {results['when']} ({results['minutes']:.1f} min; "
        f"load average at start {results['load']}; {results.get('versions', '')}). The machine "
        "is shared (2 cores): wall times are noisy, CPU times are the steadier figure (both per "
        "query, including the query encode, served from the embedding cache).",
        "",
        "BM25 (bm25s, english analyzer, k1=1.5, b=0.75) and dense (all-MiniLM-L6-v2 packaged, "
        "embedded Qdrant Edge, the default store: one vector per document, or with `passages` "
        "each document longer than the model's 256 word pieces split into 256-word-piece "
        "passages, the title leading each, the last one ending with the text, and a document "
        "scored by its best passage, or with the passages' `sentence_weight` w by (1 - w) x its "
        "best passage + w x its best sentence (each sentence embedded on its own); the shipped "
        f"default: {results['tuning']['variant']}), each "
        f"asked for {results['depth']} candidates; the fused list is cut "
        f"to {results['depth']}. Methods: `rrf` (1/(k+rank)); `minmax`, `zscore`, `dbsf` "
        "(weighted sum of per-branch normalised scores; dbsf maps mean - 3 std to 0 and mean + "
        "3 std to 1, as Qdrant does). Weights: lexical 1, dense `w_dense`. The defaults row runs "
        "the real graph built from a configuration with no `fusion:` block (timed end to end: "
        "both branches, fusion and the cheap lexical extractive answer over the top 100); the "
        "other fused rows fuse the same branch results offline with `nodes.fuse.fuse_branches` "
        "(the same function the graph's fuse node runs; timed: the fusion step alone).",
        "",
        "## Bars",
        "",
        *bar_lines(results),
        "",
        "## Held-out figures",
        "",
        f"### {results['scifact']['title']}",
        "",
        result_table(results["scifact"]["rows"], ["nDCG@10", "R@100"]),
        "",
        f"### {results['hotpotqa']['title']}",
        "",
        result_table(
            results["hotpotqa"]["rows"], ["R@10", "AllSupport@10", "AllSupport@20", "R@100"]
        ),
        "",
        *(
            [
                f"### {results[VASWANI]['title']}",
                "",
                result_table(results[VASWANI]["rows"], ["nDCG@10", "R@100"]),
                "",
            ]
            if VASWANI in results
            else []
        ),
        "## Tuning (training data only)",
        "",
        "Objectives: SciFact train nDCG@10 "
        f"({results['train_queries']['scifact']} queries) and HotpotQA first "
        f"{results['train_queries']['hotpotqa']} questions AllSupport@10. Grids: rrf k in "
        f"{list(RRF_K_GRID)} x w_dense in "
        f"{list(RRF_WEIGHT_GRID)}; minmax, zscore, dbsf w_dense in {list(SCORE_WEIGHT_GRID)}. "
        "Training winner = the best mean of the two objectives (ties: equal weights first). "
        "The shipped fusion default was chosen, before the dense branch scored sentences, as the "
        "best training mean among the settings that keep the product's example-question floor "
        "(tests/integration/test_end_to_end.py: the fused top 3 holds the gold document of "
        "every question only one retriever finds); it was kept when sentences came (only the "
        "dense aggregate was chosen then); see the notes for the floor with sentences.",
        "",
        tuning_table(tuned["rows"]),
        "",
        "Single retrievers on the same training queries: "
        + ", ".join(
            f"{name} {', '.join(f'{k} {v:.4f}' for k, v in figures.items())}"
            for name, figures in tuned["singles"].items()
        )
        + f" (dense: {tuned.get('variant', VARIANTS[False])}).",
        "",
        *(other_tuning(tuned["other"]) if "other" in tuned else []),
        "## A branch without scores",
        "",
        "A retriever that reports no scores (or scores that do not descend with rank) is "
        "normalised on reciprocal-rank pseudo-scores 1/(k+rank). Measured on the training "
        "data with the dense branch's scores removed, at the chosen default weights:",
        "",
        markdown_table(
            ["method", "SciFact train nDCG@10", "HotpotQA tune AllSupport@10"],
            [
                [r["label"], f"{r['scifact']:.4f}", f"{r['hotpotqa']:.4f}"]
                for r in results["scoreless"]
            ],
        ),
        "",
    ]
    for note in [*results.get("notes", []), *variant_note(results)]:
        out.append(f"- {note}")
    return "\n".join(out).rstrip() + "\n"


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS_MD)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--smoke", action="store_true", help="a few queries, to check the script (bench/out)"
    )
    parser.add_argument(
        "--tune-only", action="store_true", help="stop after tuning (prints the winners)"
    )
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite --out from the last results.json"
    )
    parser.add_argument(
        "--variants",
        choices=("both", "shipped"),
        default="both",
        help="dense with and without passages, or only the shipped variant",
    )
    args = parser.parse_args(argv)
    work_dir = WORK_DIR.with_name("fusion-smoke") if args.smoke else WORK_DIR
    if args.smoke and args.out == RESULTS_MD:
        args.out = work_dir / "FUSION-RESULTS.md"
    args.json = args.json or work_dir / "results.json"
    hotpot_tune = 6 if args.smoke else HOTPOT_TUNE
    if args.render_only:
        results = json.loads(args.json.read_text())
        results["notes"] = [n for n in results["notes"] if n not in STATIC_NOTES] + STATIC_NOTES
        args.out.write_text(render(results))
        return 0
    started = time.perf_counter()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    from parallel_rag.studio.evaluation import MissingDatasetError, load_beir

    try:
        sci_test, sci_train = load_scifact("test"), load_scifact("train")
        hotpot = load_hotpotqa()
        vaswani = load_beir(data_root() / VASWANI, "test")
    except (DataMissing, MissingDatasetError) as error:
        print(error, file=sys.stderr)
        return 2
    if args.smoke:
        from bench.data import smoke_hotpotqa, smoke_scifact

        sci_test, sci_train = smoke_scifact(sci_test, sci_train)
        hotpot = smoke_hotpotqa(hotpot, 16)
        vaswani, _ = smoke_scifact(vaswani, vaswani)

    from parallel_rag.graph.configuration import FusionConfig
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.evaluation import single_retrievers

    from bench.embedding_cache import EmbeddingCache, installed, warm

    depth = args.depth
    cache = EmbeddingCache(CACHE_DIR)
    results: dict[str, Any] = {
        "command": "python -m bench.fusion_methods"
        + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv)),
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": load,
        "depth": depth,
        "versions": versions(),
        "notes": [],
    }
    tune_set, report_set = hotpot.split(hotpot_tune)
    shipped_passages = passages_by_default()
    other_passages = None if shipped_passages else PASSAGES_ON
    both = args.variants == "both"
    with installed(cache) as cached, edge_reads_the_cache(cached):
        queries = [*sci_test.queries.values(), *sci_train.queries.values()]
        queries += [*vaswani.queries.values(), *(q["question"] for q in hotpot.questions)]
        warm(cache, queries, "queries", log)
        warm(cache, [doc_text(d) for d in hotpot.corpus.values()], "hotpotqa corpus", log)
        warm(cache, [doc_text(d) for d in sci_test.corpus.values()], "scifact corpus", log)
        warm(cache, [doc_text(d) for d in vaswani.corpus.values()], "vaswani corpus", log)

        sci_work, hot_work = work_dir / "scifact", work_dir / "hotpotqa"
        vas_work = work_dir / VASWANI
        need_passages = both or shipped_passages
        build_edge_indexes(sci_test.corpus, sci_work, "scifact", depth, need_passages)
        build_edge_indexes(hotpot.corpus, hot_work, "hotpotqa", depth, need_passages)
        build_edge_indexes(vaswani.corpus, vas_work, VASWANI, depth, need_passages)
        sci_config = no_fusion_settings(sci_work, "scifact", depth)
        hot_config = no_fusion_settings(hot_work, "hotpotqa", depth)
        vas_config = no_fusion_settings(vas_work, VASWANI, depth)
        sci_other = hot_other = vas_other = None
        if both:
            sci_other = no_fusion_settings(sci_work, "scifact", depth, other_passages)
            hot_other = no_fusion_settings(hot_work, "hotpotqa", depth, other_passages)
            vas_other = no_fusion_settings(vas_work, VASWANI, depth, other_passages)

        # training: branch results once, every grid setting offline through fuse_branches
        sci_branches, _ = branch_results(
            single_retrievers(parse_config(sci_config), sci_work), sci_train.queries, depth
        )
        tune_queries = {q["_id"]: q["question"] for q in tune_set}
        hot_branches, _ = branch_results(
            single_retrievers(parse_config(hot_config), hot_work), tune_queries, depth
        )

        def with_other_dense(branches, config, work, queries):
            """The branches with the dense one from the other variant (the lexical stays)."""
            dense = {DENSE: single_retrievers(parse_config(config), work)[DENSE]}
            other, _ = branch_results(dense, queries, depth)
            return {
                qid: [b for b in bs if b["retriever"] != DENSE]
                + [{**other[qid][0], "retriever_index": 1}]
                for qid, bs in branches.items()
            }

        def sci_objective(runs):
            return scifact_measures(runs, sci_train.qrels)["nDCG@10"]

        def hot_objective(runs):
            return hotpot_measures(runs, tune_set)["AllSupport@10"]

        objectives = {
            "scifact": (sci_branches, sci_objective),
            "hotpotqa": (hot_branches, hot_objective),
        }
        log(f"[tune] {len(grid())} settings x 2 collections")
        table = tune(objectives, depth)
        chosen = best(table, "mean")
        picked = [("training winner (best mean)", chosen)]
        for method in ("rrf", *SCORE_METHODS):
            picked.append((f"best {method} (mean)", best(table, "mean", method)))
        for name in ("scifact", "hotpotqa"):
            picked.append((f"best on {name}", best(table, name)))
        rrf60 = next(r for r in table if r["setting"] == Setting("rrf", 60, 1.0))
        fc = FusionConfig()
        shipped_setting = Setting(fc.method, fc.k, fc.dense_weight)
        shipped_row = next((r for r in table if _same(r["setting"], shipped_setting)), None)
        if shipped_row is not None:
            picked.insert(1, ("shipped default", shipped_row))
        picked.append(("previous default", rrf60))
        for why, row in picked:
            log(
                f"[tune] {why}: {row['setting'].label()} scifact={row['scifact']:.4f} "
                f"hotpotqa={row['hotpotqa']:.4f} mean={row['mean']:.4f}"
            )
        singles = {
            name: {
                "SciFact train nDCG@10": sci_objective(single_runs(sci_branches, name)),
                "HotpotQA tune AllSupport@10": hot_objective(single_runs(hot_branches, name)),
            }
            for name in (LEX, DENSE)
        }
        results["tuning"] = {
            "rows": [
                {
                    "why": why,
                    "label": r["setting"].label(),
                    **{k: r[k] for k in ("scifact", "hotpotqa", "mean")},
                }
                for why, r in picked
            ],
            "singles": singles,
            "grid": [
                {
                    "setting": r["setting"].__dict__,
                    "scifact": r["scifact"],
                    "hotpotqa": r["hotpotqa"],
                }
                for r in table
            ],
        }
        results["tuning"]["variant"] = VARIANTS[shipped_passages]
        if both:
            record_other_tuning(
                results,
                with_other_dense(sci_branches, sci_other, sci_work, sci_train.queries),
                with_other_dense(hot_branches, hot_other, hot_work, tune_queries),
                sci_objective,
                hot_objective,
                shipped_setting,
                rrf60["setting"],
                not shipped_passages,
                depth,
            )
        results["train_queries"] = {
            "scifact": len(sci_train.queries),
            "hotpotqa": len(tune_set),
        }

        default = chosen["setting"]
        shipped = FusionConfig()
        as_shipped = Setting(shipped.method, shipped.k, shipped.dense_weight)
        shipped_label = (
            f"{shipped.method}, k={shipped.k}, dense weight {shipped.dense_weight:g}, others 1"
        )
        if not _same(as_shipped, default) or shipped.weights:
            results["notes"].append(
                f"The shipped FusionConfig defaults ({shipped_label}) differ from the training "
                f"winner ({default.label()})."
            )

        results["notes"] += STATIC_NOTES
        if shipped_row is not None:
            lexical_tune = singles[LEX]["HotpotQA tune AllSupport@10"]
            if shipped_row["hotpotqa"] < lexical_tune:
                results["notes"].append(
                    "On the HotpotQA tuning questions the shipped default "
                    f"({shipped_row['hotpotqa']:.2f}) stays below BM25 alone "
                    f"({lexical_tune:.2f})."
                )

        # the scoreless-branch rule, on training data
        results["scoreless"] = []
        for method in SCORE_METHODS:
            setting = Setting(method, 60, shipped.dense_weight)
            results["scoreless"].append(
                {
                    "label": f"{setting.label()}, dense without scores",
                    "scifact": sci_objective(
                        fused_runs(
                            without_scores(sci_branches, DENSE), method, 60, setting.weights, depth
                        )
                    ),
                    "hotpotqa": hot_objective(
                        fused_runs(
                            without_scores(hot_branches, DENSE), method, 60, setting.weights, depth
                        )
                    ),
                }
            )

        if args.tune_only:
            return 0

        # held-out: real graph, the defaults come from a config with no fusion: block
        candidates = [("previous default (rrf, k=60, equal weights)", Setting("rrf", 60, 1.0))]
        if not _same(default, as_shipped):
            candidates.append((f"{default.label()} (training winner)", default))
        for method in ("rrf", *SCORE_METHODS):
            setting = best(table, "mean", method)["setting"]
            if any(_same(setting, other) for _, other in candidates):
                continue
            candidates.append((f"{setting.label()} (best {method} on train)", setting))
        same = [label for label, setting in candidates if _same(setting, as_shipped)]
        default_label = f"defaults (no fusion: settings; {shipped_label})" + (
            f" = {'; '.join(same)}" if same else ""
        )
        report_settings: list[tuple[str, Setting | None, bool]] = [(default_label, None, True)]
        report_settings += [(lb, st, False) for lb, st in candidates if not _same(st, as_shipped)]
        sci_queries = sci_test.queries
        hot_queries = {q["_id"]: q["question"] for q in report_set}
        results["scifact"] = {
            "title": f"SciFact test ({len(sci_queries)} queries, {len(sci_test.corpus):,} docs)",
            "rows": report_rows(
                "scifact",
                sci_config,
                sci_other,
                sci_work,
                sci_queries,
                lambda runs: scifact_measures(runs, sci_test.qrels),
                report_settings,
                depth,
            ),
        }
        results["hotpotqa"] = {
            "title": (
                f"HotpotQA dev500 questions {hotpot_tune + 1}-{len(hotpot.questions)} "
                f"({len(hot_queries)} questions, {len(hotpot.corpus):,} paragraphs)"
            ),
            "rows": report_rows(
                "hotpotqa",
                hot_config,
                hot_other,
                hot_work,
                hot_queries,
                lambda runs: hotpot_measures(runs, report_set),
                report_settings,
                depth,
            ),
        }
        # a collection nothing was tuned on: every judged query, the defaults and RRF beside
        results[VASWANI] = {
            "title": (
                f"Vaswani, not tuned on ({len(vaswani.queries)} queries, "
                f"{len(vaswani.corpus):,} docs)"
            ),
            "rows": report_rows(
                VASWANI,
                vas_config,
                vas_other,
                vas_work,
                vaswani.queries,
                lambda runs: scifact_measures(runs, vaswani.qrels),
                [
                    (default_label, None, True),
                    (candidates[0][0], candidates[0][1], False),
                ],
                depth,
            ),
        }
    results["minutes"] = (time.perf_counter() - started) / 60
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=str))
    text = render(results)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
