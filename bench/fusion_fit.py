"""Fusion fitted to each corpus without labels, against the shipped default and a label-chosen
ceiling: ``python -m bench.fusion_fit`` prints the per-collection table and writes
``bench/FUSION-FIT-RESULTS.md`` (``--no-write``: print only).

Each branch's candidate lists (BM25 and dense, ``DEPTH`` deep) are retrieved once per query from
the shipped pipeline's indexes (``bench.pipelines.no_fusion_settings``: BM25 and Qdrant Edge with
passages and sentences, the default document encoder, vectors from the bench's embedding cache)
and kept under ``bench/out/fusion-fit/<collection>/`` (gitignored), keyed by the corpus, the
configuration and the queries; every row is then an offline re-fusion through
``nodes.fuse.fuse_branches`` itself, so a rerun costs no retrieval.

Collections: SciFact, HotpotQA dev500 (the pooled corpus), Vaswani, and two held-out
multi-hop collections nothing was tuned on (``hotpotqa_held_out``: 100 HotpotQA questions over
their own ten context paragraphs each, distractors picked lexically by HotpotQA).

Rows, on each collection's reported queries (SciFact test; HotpotQA dev500 questions 101-500;
Vaswani's 93; all 100 of a held-out one): BM25 as shipped before titles were weighted and as
now (``TITLE_WEIGHT``), dense; **the baseline**, today's shipped default before this bench's
changes (titles indexed once, min-max, dense 0.75) at 20 and 100 candidates per branch; the
shipped default (min-max, dense 0.75) over the branches as now, fused from 20 and
from 100 candidates per branch (the quality bars fuse 100); RRF k 60; per-query weighting (each
branch's weight scaled by how far its top hit stands above its own list, no fitting); the
fitted settings (``studio.fusion_fit.fit_fusion`` run on the same indexes, from the corpus
alone: it never sees a query or a judgement), with the fit's wall and CPU time; the best grid
setting chosen with the real labels on the choosing queries (SciFact train, HotpotQA 1-100;
Vaswani has no split, so its ceiling is an oracle on the reported queries), and the oracle
(the best grid setting on the reported queries themselves).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LANGSMITH_TRACING", "false")

from bench.data import (  # noqa: E402
    REPO_ROOT,
    DataMissing,
    load_hotpotqa,
    load_scifact,
    load_vaswani,
    sentence_fingerprint,
)
from bench.embedding_cache import EmbeddingCache, installed  # noqa: E402
from bench.pipelines import (  # noqa: E402
    DENSE,
    LEX,
    edge_reads_the_cache,
    fingerprint,
    log,
    no_fusion_settings,
)
from bench.tables import cell, markdown_table  # noqa: E402

DEPTH = 100
OUT_DIR = REPO_ROOT / "bench" / "out"
CACHE_DIR = OUT_DIR / "cache"
WORK_DIR = OUT_DIR / "fusion-fit"
RETRIEVERS = (LEX, DENSE)
LEX_BEFORE = "lexical_titles_once"  # the baseline's lexical branch (see titles_once_index)
HOTPOT_TUNE = 100  # HotpotQA's first questions: where a label-chosen setting is chosen


class Collection:
    """A collection's corpus, its query sets (``choose``: where a label-chosen setting is
    chosen; ``report``: what the table reports) and their judgements (graded qrels)."""

    def __init__(
        self,
        name: str,
        corpus: dict[str, dict[str, str]],
        queries: dict[str, str],
        qrels: dict[str, dict[str, int]],
        choose: list[str],
        report: list[str],
    ):
        self.name, self.corpus, self.queries, self.qrels = name, corpus, queries, qrels
        self.choose, self.report = choose, report


def scifact() -> Collection:
    train, test = load_scifact("train"), load_scifact("test")
    queries = {**train.queries, **test.queries}
    qrels = {**train.qrels, **test.qrels}
    choose, report = sorted(train.qrels), sorted(test.qrels)
    return Collection("scifact", test.corpus, queries, qrels, choose, report)


def hotpotqa() -> Collection:
    data = load_hotpotqa()
    queries = {q["_id"]: q["question"] for q in data.questions}
    qrels = {q["_id"]: dict.fromkeys(q["supporting_doc_ids"], 1) for q in data.questions}
    tune, report = ([q["_id"] for q in part] for part in data.split(HOTPOT_TUNE))
    return Collection("hotpotqa", data.corpus, queries, qrels, tune, report)


def hotpotqa_held_out(first: int, last: int) -> Collection:
    """A held-out multi-hop collection: HotpotQA questions ``first``-``last`` (1-based) over
    their own context paragraphs alone (about ten each: the two supporting ones and eight
    distractors HotpotQA picked by bigram TF-IDF against the question, which makes them hard
    for the lexical branch). Nothing was tuned on these questions or this corpus: the shipped
    fusion was chosen on questions 1-100 of the pooled corpus, BM25's title weight on SciFact
    train."""
    data = load_hotpotqa()
    questions = data.questions[first - 1 : last]
    corpus_ids = {d for q in questions for d in q["context_doc_ids"]}
    corpus = {d: data.corpus[d] for d in sorted(corpus_ids)}
    queries = {q["_id"]: q["question"] for q in questions}
    qrels = {q["_id"]: dict.fromkeys(q["supporting_doc_ids"], 1) for q in questions}
    qids = [q["_id"] for q in questions]
    return Collection(f"hotpotqa-held-{first}-{last}", corpus, queries, qrels, qids, qids)


def vaswani() -> Collection:
    data = load_vaswani()
    qids = sorted(data.qrels)
    # no split: a label-chosen setting is chosen on the reported queries (an oracle)
    return Collection("vaswani", data.corpus, data.queries, data.qrels, qids, qids)


COLLECTIONS = {
    "scifact": scifact,
    "hotpotqa": hotpotqa,
    "vaswani": vaswani,
    "hotpotqa-held-301-400": lambda: hotpotqa_held_out(301, 400),
    "hotpotqa-held-401-500": lambda: hotpotqa_held_out(401, 500),
}
HELD_OUT = {name for name in COLLECTIONS if "held" in name}


def _indexed(collection: Collection, work: Path) -> dict[str, Any]:
    """The shipped pipeline over ``work``'s indexes, built unless already built for it."""
    from parallel_rag.backends.bm25.retriever import TITLE_WEIGHT
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.evaluation import index_corpus

    config = no_fusion_settings(work, collection.name, DEPTH)
    signature = {
        "docs": len(collection.corpus),
        "bm25_title_weight": TITLE_WEIGHT,
        "sentences": sentence_fingerprint(collection.corpus),
        "config": fingerprint(parse_config(config).model_dump(mode="json")),
    }
    marker = work / "index.json"
    if not (marker.is_file() and json.loads(marker.read_text()) == signature):
        log(f"[index] {collection.name}: {len(collection.corpus)} documents into {work}")
        wall, cpu = time.perf_counter(), time.process_time()
        marker.unlink(missing_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        index_corpus(collection.corpus, parse_config(config), work)
        marker.write_text(json.dumps(signature))
        log(
            f"[index] {collection.name}: {time.perf_counter() - wall:.0f} s wall, "
            f"{time.process_time() - cpu:.0f} s CPU"
        )
    return {**signature, "config": config}


def branch_runs(collection: Collection, cache: EmbeddingCache | None = None) -> dict[str, Any]:
    """``{query id: {retriever: [[doc id, score], ...]}}`` for every query of ``collection``,
    ``DEPTH`` deep, from the cached run file or retrieved now (and cached)."""
    from parallel_rag.backends.base import SCORE_KEY
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.evaluation import DOC_ID_KEY, single_retrievers

    work = WORK_DIR / collection.name
    cache = cache or EmbeddingCache(CACHE_DIR)
    with installed(cache) as cached, edge_reads_the_cache(cached):
        built = _indexed(collection, work)
        key = fingerprint({**built, "queries": sorted(collection.queries.items())})
        path = work / f"runs-{key}.json"
        if path.is_file():
            return json.loads(path.read_text())
        retrievers = single_retrievers(parse_config(built["config"]), work)
        before = titles_once_index(collection)
        runs: dict[str, Any] = {}
        wall, cpu = time.perf_counter(), time.process_time()
        for qid, text in collection.queries.items():
            runs[qid] = {
                name: [
                    [str(d.metadata[DOC_ID_KEY]), float(d.metadata[SCORE_KEY])]
                    for d in retrievers[name].invoke(text, k=DEPTH)
                ]
                for name in RETRIEVERS
            }
            runs[qid][LEX_BEFORE] = [
                [str(h.chunk.metadata[DOC_ID_KEY]), float(h.score)]
                for h in before.search(text, k=DEPTH)
            ]
        log(
            f"[runs] {collection.name}: {len(runs)} queries in {time.perf_counter() - wall:.0f} s "
            f"wall, {time.process_time() - cpu:.0f} s CPU"
        )
    path.write_text(json.dumps(runs))
    return runs


def titles_once_index(collection: Collection):
    """The BM25 index as shipped before titles were weighted (each title indexed once, as part
    of the text): the same chunks without their ``title`` metadata, in memory."""
    from parallel_rag.backends.bm25.retriever import BM25Index
    from parallel_rag.studio.evaluation import corpus_chunks

    return BM25Index.from_chunks(
        (c.id, c.content, {k: v for k, v in c.metadata.items() if k != "title"})
        for c in corpus_chunks(collection.corpus)
    )


RESULTS_MD = REPO_ROOT / "bench" / "FUSION-FIT-RESULTS.md"
SHIPPED_DEPTH = 20  # what a request for 10 documents fuses: each branch asks for 2 x 10
BASELINE = "today's default (titles once)"  # before this bench's changes: see titles_once_index


def title_weight() -> int:
    from parallel_rag.backends.bm25.retriever import TITLE_WEIGHT

    return TITLE_WEIGHT


PER_QUERY_ALPHA = 0.5  # per-query weighting: weight x (confidence / mean confidence) ** alpha


def fused(lists: Mapping[str, list], candidate, depth: int, weights=None) -> list[str]:
    from parallel_rag.nodes.fuse import fuse_branches
    from parallel_rag.studio.fusion_fit import branch_results

    cut = {name: [tuple(hit) for hit in lists[name][:depth]] for name in RETRIEVERS}
    weights = weights or candidate.weights(RETRIEVERS, [DENSE])
    documents = fuse_branches(
        branch_results(cut), method=candidate.method, k=candidate.k, weights=weights, top_k=10
    )
    return [d["id"] for d in documents]


def confidence(scores: list[float]) -> float:
    """How far a branch's top hit stands above its own list (its z-score); 1 when flat."""
    if len(scores) < 3:
        return 1.0
    spread = statistics.stdev(scores)
    return (scores[0] - statistics.mean(scores)) / spread if spread > 0 else 1.0


def per_query(lists: Mapping[str, list], depth: int) -> list[str]:
    """The shipped default with each branch's weight scaled per query by its confidence."""
    from parallel_rag.studio.fusion_fit import SHIPPED

    cut = {name: lists[name][:depth] for name in RETRIEVERS}
    conf = {n: max(confidence([s for _, s in cut[n]]), 1e-6) for n in RETRIEVERS}
    mean = statistics.mean(conf.values())
    base = SHIPPED.weights(RETRIEVERS, [DENSE])
    weights = {n: base[n] * (conf[n] / mean) ** PER_QUERY_ALPHA for n in RETRIEVERS}
    return fused(lists, SHIPPED, depth, weights)


def measures(ranked: Mapping[str, list[str]], collection: Collection, qids) -> dict[str, float]:
    from parallel_rag.studio.evaluation import score_runs

    qrels = {q: collection.qrels[q] for q in qids}
    scores = score_runs({q: ranked[q] for q in qids}, qrels, ["nDCG@10", "R@10"])
    return {"nDCG@10": scores["nDCG@10"], "R@10": scores["R@10"]}


def grid_means(runs, collection: Collection, qids, depth: int = DEPTH) -> dict:
    from parallel_rag.studio.fusion_fit import CANDIDATES, ndcg_at_10

    return {
        c: statistics.mean(ndcg_at_10(fused(runs[q], c, depth), collection.qrels[q]) for q in qids)
        for c in CANDIDATES
    }


def fit(collection: Collection, cache: EmbeddingCache) -> dict[str, Any]:
    """The product's fit on the collection's indexes (the corpus alone), timed."""
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.fusion_fit import fit_fusion

    work = WORK_DIR / collection.name
    config = parse_config(no_fusion_settings(work, collection.name, DEPTH))
    with installed(cache) as cached, edge_reads_the_cache(cached):
        report = fit_fusion(config, work, write=False)
    return report.record


def label(candidate) -> str:
    k = f" k {candidate.k}" if candidate.method == "rrf" else ""
    return f"{candidate.method}{k}, dense {candidate.dense_weight:g}"


def collection_rows(collection: Collection, cache: EmbeddingCache) -> tuple[list, dict]:
    from parallel_rag.studio.fusion_fit import SHIPPED, Candidate

    runs = branch_runs(collection, cache)
    qids = collection.report
    record = fit(collection, cache)
    settings = record.get("settings") or {}
    evidence = record["evidence"]
    if record["status"] == "fitted":
        dense_weight = settings["weights"][DENSE] / settings["weights"][LEX]
        fitted = Candidate(settings["method"], dense_weight, settings.get("k", SHIPPED.k))
    else:
        fitted = SHIPPED
    ceiling_grid = grid_means(runs, collection, collection.choose)
    ceiling = max(ceiling_grid, key=ceiling_grid.get)
    oracle_grid = grid_means(runs, collection, qids) if collection.choose != qids else ceiling_grid
    oracle = max(oracle_grid, key=oracle_grid.get)
    fit_time = f"{evidence['seconds']:.0f} s wall, {evidence['cpu_seconds']:.0f} s CPU"
    before = {q: {LEX: runs[q][LEX_BEFORE], DENSE: runs[q][DENSE]} for q in qids}
    rows_spec = [
        ("BM25, titles once (before)", "", {q: [d for d, _ in runs[q][LEX_BEFORE][:10]]
                                           for q in qids}),
        (f"BM25, titles x{title_weight()}", "", {q: [d for d, _ in runs[q][LEX][:10]]
                                                for q in qids}),
        ("dense", "", {q: [d for d, _ in runs[q][DENSE][:10]] for q in qids}),
        (f"{BASELINE} @{SHIPPED_DEPTH}", label(SHIPPED),
         {q: fused(before[q], SHIPPED, SHIPPED_DEPTH) for q in qids}),
        (f"{BASELINE} @{DEPTH}", label(SHIPPED), {q: fused(before[q], SHIPPED, DEPTH)
                                                  for q in qids}),
        (f"shipped default @{SHIPPED_DEPTH}", label(SHIPPED),
         {q: fused(runs[q], SHIPPED, SHIPPED_DEPTH) for q in qids}),
        (f"shipped default @{DEPTH}", label(SHIPPED),
         {q: fused(runs[q], SHIPPED, DEPTH) for q in qids}),
        (f"RRF @{DEPTH}", "rrf k 60, equal", {q: fused(runs[q], Candidate("rrf", 1.0), DEPTH)
                                              for q in qids}),
        (f"per-query weighting @{DEPTH}", f"minmax, dense 0.75 x conf^{PER_QUERY_ALPHA}",
         {q: per_query(runs[q], DEPTH) for q in qids}),
        (f"fitted @{SHIPPED_DEPTH}", label(fitted),
         {q: fused(runs[q], fitted, SHIPPED_DEPTH) for q in qids}),
        (f"fitted @{DEPTH}", label(fitted), {q: fused(runs[q], fitted, DEPTH) for q in qids}),
        (f"label ceiling @{DEPTH}", label(ceiling), {q: fused(runs[q], ceiling, DEPTH)
                                                    for q in qids}),
        (f"oracle @{DEPTH}", label(oracle), {q: fused(runs[q], oracle, DEPTH) for q in qids}),
    ]  # fmt: skip
    rows, found = [], {}
    for name, setting, ranked in rows_spec:
        scores = measures(ranked, collection, qids)
        found[name] = scores["nDCG@10"]
        time_cell = fit_time if name.startswith("fitted") else ""
        rows.append([collection.name, name, setting, cell(scores["nDCG@10"], 4),
                     cell(scores["R@10"], 4), time_cell])  # fmt: skip
    singles = {n: found[n] for n in found if n.startswith(("BM25, titles x", "dense"))}
    best_single = max(singles, key=singles.get)
    baseline, now = found[f"{BASELINE} @{DEPTH}"], found[f"fitted @{DEPTH}"]
    note = {
        "collection": collection.name,
        "status": record["status"],
        "reason": record.get("reason") or record.get("note"),
        "pseudo_queries": evidence.get("pseudo_queries"),
        "chunks": evidence.get("chunks"),
        "chosen_score": evidence.get("chosen_score"),
        "default_score": evidence.get("default_score"),
        "best": (evidence.get("best") or [])[:3],
        "label_default": ceiling_grid[SHIPPED],
        "label_ceiling": ceiling_grid[ceiling],
        "single_branches": evidence.get("single_branches"),
        "bar": [
            collection.name + (" (held out)" if collection.name in HELD_OUT else ""),
            f"{best_single} {singles[best_single]:.4f}",
            cell(baseline, 4),
            cell(now, 4),
            f"{now - singles[best_single]:+.4f}",
            f"{now - baseline:+.4f}",
            "met" if now >= singles[best_single] else "**missed**",
        ],
    }
    return rows, note


HEADERS = ["collection", "row", "setting", "nDCG@10", "R@10", "fit time"]
BAR_HEADERS = [
    "collection",
    "best single (nDCG@10)",
    f"baseline: {BASELINE} @{DEPTH}",
    f"default now (fitted) @{DEPTH}",
    "now - best single",
    "now - baseline",
    "fused >= best single",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fusion_fit")
    parser.add_argument("--collections", default=",".join(COLLECTIONS))
    parser.add_argument("--no-write", action="store_true", help="print, do not write the md")
    args = parser.parse_args(argv)
    wall, cpu = time.perf_counter(), time.process_time()
    cache = EmbeddingCache(CACHE_DIR)
    rows, notes = [], []
    try:
        for name in args.collections.split(","):
            collection = COLLECTIONS[name]()
            found, note = collection_rows(collection, cache)
            rows += found
            notes.append(note)
            log(markdown_table(HEADERS, found, "lllrrl"))
    except DataMissing as error:
        print(error)
        return 2
    table = markdown_table(HEADERS, rows, "lllrrl")
    bars = markdown_table(BAR_HEADERS, [n["bar"] for n in notes], "llrrrrl")
    took = f"{time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU"
    print(bars)
    print(table)
    print(json.dumps(notes, indent=1, default=str))
    print(f"bench.fusion_fit: {took}")
    if not args.no_write:
        write_results(bars + "\n\n" + table, notes, took)
    return 0


def write_results(table: str, notes: list[dict], took: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Fusion fitted to each corpus without labels",
        "",
        f"`python -m bench.fusion_fit`, {stamp}, {platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared), run in {took}. See the module docstring for what each row is.",
        "",
        table,
        "",
        "## What the fit saw",
        "",
    ]
    for n in notes:
        best = (
            "; ".join(f"{b['method']} {b['dense_weight']:g}: {b['score']:.4f}" for b in n["best"])
            or "–"
        )
        lines.append(
            f"- **{n['collection']}**: {n['status']} ({n['reason'] or 'a setting beat the default'}"
            f"); {n['pseudo_queries']} pseudo-queries from {n['chunks']} chunks; pseudo-query "
            f"nDCG@10 chosen {n['chosen_score']}, shipped default {n['default_score']}; best three "
            f"{best}. With the labels on the choosing queries: shipped default "
            f"{n['label_default']:.4f}, ceiling {n['label_ceiling']:.4f}. Each branch alone on "
            f"the pseudo-queries: {n['single_branches']}."
        )
    RESULTS_MD.write_text("\n".join(lines) + "\n" + FINDINGS, encoding="utf-8")


FINDINGS = """
## Findings

- **SciFact test 0.7378 on the int8 encoder (bar 0.735; baseline 0.7299), from the lexical
  branch, not the fusion**: BM25 now counts a chunk's leading title line 3 times
  (`TITLE_WEIGHT` in backends/bm25/retriever.py, a field weight as BM25F gives a title; only
  where the `title` metadata opens the chunk's text, as ingest writes a JSONL/CSV record and
  `eval` a BEIR document). Chosen on SciFact **train** by BM25 alone, shipped k1 1.5, b 0.75:
  nDCG@10 0.6970 / 0.7031 / 0.7059 / 0.7062 / 0.7050 / 0.7040 at weights 1-6, so 3, where it
  stops rising (4 is 0.0003 higher, within noise). The fused train score is flat over 2-5
  (0.7471 / 0.7468 / 0.7458 / 0.7474 against 0.7448 at 1); on test the weights 2-6 give
  0.7326 / 0.7378 / 0.7368 / 0.7358 / 0.7355: the bar holds from 3 up, not at 2. Over the 16
  k1/b settings {0.7, 0.9, 1.2, 1.5} x {0.5, 0.6, 0.75, 0.9} the mean fused test score is
  0.7318 (titles once), 0.7346 (twice), 0.7369 (three times); the train-best k1/b cell
  (titles twice, k1 1.5, b 0.6: train 0.7488) gives only 0.7330 on test, so k1/b stay as
  shipped. Checked against the baseline (today's default, titles once) on the others: HotpotQA
  101-500 +0.0158 (0.8608 -> 0.8766: the questions name entities, which are the titles),
  Vaswani +0.0000 (no titles; k1 0.9 / b 0.6 would give it +0.018 but lowers SciFact train,
  so not taken), the held-out collections +0.017 and +0.025. The dense branch is unchanged
  (it already leads every passage with the title).
- **Fused >= the best single retriever on every collection here, the two held-out ones
  included** (the bar table above). The held-out collections are HotpotQA questions 301-400
  and 401-500 over their own context paragraphs only (976 / 968 paragraphs: the two
  supporting ones and HotpotQA's lexically picked distractors): nothing was tuned on them.
  Before the title weight, dense alone beat BM25 there by 0.06-0.08 (as on the issue's
  held-out collection) and the shipped default was 0.0015 and 0.0076 above dense alone
  (0.9072 vs 0.9057, 0.9157 vs 0.9081); now 0.019 and 0.026 above the best branch.
- **The fit on the held-out collections moves off the shipped default**, by the margin rule
  (pseudo-query nDCG@10 +0.017 and +0.012): zscore dense 1.25 and dbsf dense 1.25, +0.0021
  and +0.0012 against the shipped default there with the real labels, within 0.0012 and
  0.0016 of the label-chosen oracle. On SciFact, HotpotQA and Vaswani it keeps the default.
- **The margin no longer keeps a default that loses to one of its branches**: the fit scores
  each branch alone on the same pseudo-queries (the record's `single_branches`), and when the
  shipped default scores below one of them, the best setting replaces it whatever the margin
  (`studio.fusion_fit.choose`; tests/unit/test_fusion_fit.py builds that case). On the five
  collections here the default is above both branches on the pseudo-queries (e.g. SciFact
  0.599 against 0.572 / 0.449), so this rule did not fire; the issue's collection (dense 0.650
  against fused 0.649) is not among the data here, so it is not measured on it.
- **Per-query weighting** (each branch's weight x (z-score of its top hit / the mean over the
  branches) ^ 0.5, no fitting) moves nDCG@10 by +0.0009 (SciFact), -0.0008 (HotpotQA), -0.0046
  (Vaswani), -0.0004 and +0.0004 (held out) against the shipped default: within noise and not
  >= the default everywhere, so it is not shipped.
- **Depth**: fusing 100 candidates per branch instead of 20 gains +0.007 (SciFact), +0.002
  (HotpotQA), +0.010 (Vaswani), -0.001 and -0.004 (held out, 1,000-paragraph corpora) at the
  shipped setting. Going deeper costs per-query time (each branch asks for more), so the fit
  does not choose a depth: a branch's `top_k` (or the request's `top_k`) decides it.
- **Fit time**: 18-70 s wall, 16-49 s CPU per collection here with the bench's embedding cache
  serving vectors (the machine shared with other benchmarks at load 3-9). On the product path
  (no bench cache) SciFact's 5,183 abstracts fit in 110 s wall, 58 s CPU (measured before
  this change; the fit's work is the same). A query costs nothing more.
"""


if __name__ == "__main__":
    raise SystemExit(main())
