"""Retrieval quality: SciFact test (nDCG@10, R@100) and HotpotQA dev500 (R@10, AllSupport@10/@20,
answer-in-top-10) for each single retriever, the fused graph at the shipped defaults (what a
configuration with no settings gets: BM25 + Qdrant Edge over passages, the default ``fusion``),
the previous default (RRF k=60, equal weights, one vector per document) as a baseline, LangChain's
``EnsembleRetriever`` over the same two retriever objects, the fused graph with RRF tuned on
training data, and with the embedding reranker.

Tuning happens on SciFact ``train`` and HotpotQA's first 100 questions only: BM25 ``k1``/``b``
and the RRF constant ``k`` and dense weight. It runs offline on the single retrievers' runs
(same RRF formula as ``nodes/fuse.py``); every reported figure comes from the real graph or
retriever on the held-out queries. The shipped fusion itself was chosen by
``bench/fusion_methods.py`` on the same training data.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from parallel_rag.backends.bm25.analysis import AnalyzerName
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.settings import ENGINES
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.evaluation import (
    DOC_ID_KEY,
    corpus_chunks,
    ranked_doc_ids,
    run_graph,
    run_retriever,
    score_runs,
    single_retrievers,
)

from bench.baselines import ensemble_of
from bench.data import HotpotQA, doc_text
from bench.embedding_cache import EmbeddingCache
from bench.pipelines import (
    DENSE,
    LEX,
    VARIANTS,
    build_edge_indexes,
    passages_by_default,
    pipeline,
)
from bench.scoring import hotpot_metrics

SCIFACT_MEASURES = ("nDCG@10", "R@100")
K1_GRID = (0.6, 0.9, 1.2, 1.5, 2.0)
B_GRID = (0.5, 0.75, 0.9, 1.0)
FUSION_K_GRID = (5, 10, 20, 40, 60, 100)
DENSE_WEIGHT_GRID = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
HOTPOT_TUNE = 100


@dataclass
class Tuned:
    k1: float = 1.5
    b: float = 0.75
    fusion_k: int = 60
    dense_weight: float = 1.0
    objective: str = ""
    score: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def weights(self) -> dict[str, float]:
        return {} if self.dense_weight == 1.0 else {LEX: 1.0, DENSE: self.dense_weight}

    def as_dict(self) -> dict[str, Any]:
        return {
            "grids": {
                "k1": list(K1_GRID),
                "b": list(B_GRID),
                "fusion_k": list(FUSION_K_GRID),
                "dense_weight": list(DENSE_WEIGHT_GRID),
            },
            "k1": self.k1,
            "b": self.b,
            "fusion_k": self.fusion_k,
            "dense_weight": self.dense_weight,
            "objective": self.objective,
            "score": self.score,
        }


PREVIOUS_FUSION = {"method": "rrf", "k": 60, "weights": {}, "dense_weight": 1.0}
"""The fusion shipped before the current defaults: RRF k=60, every retriever weight 1."""
ONE_VECTOR = None  # ``passages`` of the dense entry: one vector per document (the previous default)


def dense_label(passages: Any = "default") -> str:
    on = passages_by_default() if passages == "default" else passages is not None
    return f"dense (Qdrant Edge, MiniLM, {VARIANTS[on]})"


def shipped_label() -> str:
    """The row label of the graph at the shipped defaults (no settings at all)."""
    from parallel_rag.graph.configuration import FusionConfig

    fusion = FusionConfig()
    return (
        f"fused graph, shipped defaults ({fusion.method}, dense weight {fusion.dense_weight:g}, "
        f"dense {VARIANTS[passages_by_default()]})"
    )


PREVIOUS_LABEL = "fused graph, previous default (RRF k=60, equal weights, one vector per document)"
ENSEMBLE_LABEL = "EnsembleRetriever (the shipped retriever objects, c=60, equal weights)"


def tuned_label(tuned: Tuned) -> str:
    return (
        f"fused graph, RRF tuned on train (k1={tuned.k1}, b={tuned.b}, RRF k={tuned.fusion_k}, "
        f"w_dense={tuned.dense_weight})"
    )


def tuned_fusion(tuned: Tuned) -> dict[str, Any]:
    return {"method": "rrf", "k": tuned.fusion_k, "weights": tuned.weights, "dense_weight": 1.0}


def build_indexes(corpus: dict[str, dict[str, str]], work: Path, collection: str, depth: int):
    """Fresh BM25 and Qdrant Edge indexes of the corpus (one vector per document, and passages)
    with ``bench.pipelines.build_edge_indexes``; vectors come from the embedding cache, so
    call it with ``embedding_cache.installed`` and ``pipelines.edge_reads_the_cache``
    active. Returns the parsed shipped-defaults config."""
    shutil.rmtree(work, ignore_errors=True)  # built fresh: the product's code of today
    build_edge_indexes(corpus, work, collection, depth, passages=True)
    return parse_config(pipeline(work, collection, depth=depth))


# -- offline tuning helpers -----------------------------------------------------------------


def rrf(runs: dict[str, dict[str, list[str]]], k: int, weights: dict[str, float], depth: int):
    """RRF over per-retriever runs (``{name: {qid: ranked ids}}``), ``nodes/fuse.py``'s formula."""
    fused: dict[str, list[str]] = {}
    names = list(runs)
    for qid in runs[names[0]]:
        scores: dict[str, float] = {}
        best: dict[str, int] = {}
        for name in names:
            weight = weights.get(name, 1.0)
            for rank, doc in enumerate(runs[name].get(qid, []), start=1):
                scores[doc] = scores.get(doc, 0.0) + weight / (k + rank)
                best[doc] = min(best.get(doc, rank), rank)
        fused[qid] = sorted(scores, key=lambda d: (-scores[d], best[d]))[:depth]
    return fused


def bm25_runs(index: BM25Index, queries: dict[str, str], depth: int) -> dict[str, list[str]]:
    return {
        qid: [hit.chunk.metadata[DOC_ID_KEY] for hit in index.search(text, k=depth)]
        for qid, text in queries.items()
    }


def tune(
    corpus: dict[str, dict[str, str]],
    queries: dict[str, str],
    dense_runs: dict[str, list[str]],
    objective: Callable[[dict[str, list[str]]], float],
    objective_name: str,
    depth: int,
    log=print,
) -> Tuned:
    """Grid search of BM25 k1/b (on BM25 alone), then fusion k and dense weight (on the fused
    run with the chosen BM25)."""
    chunks = [(c.id, c.content, c.metadata) for c in corpus_chunks(corpus)]
    base = BM25Index.from_chunks(chunks)
    best = Tuned(objective=objective_name, score=-1.0)
    lexical_best: dict[str, list[str]] = {}
    for k1 in K1_GRID:
        for b in B_GRID:
            runs = bm25_runs(base.with_engine("bm25s", k1=k1, b=b), queries, depth)
            score = objective(runs)
            if score > best.score:
                best.k1, best.b, best.score, lexical_best = k1, b, score, runs
    log(f"[tune] {objective_name}: BM25 k1={best.k1} b={best.b} -> {best.score:.4f}")
    best.score = -1.0
    for k in FUSION_K_GRID:
        for weight in DENSE_WEIGHT_GRID:
            fused = rrf({LEX: lexical_best, DENSE: dense_runs}, k, {DENSE: weight}, depth)
            score = objective(fused)
            if score > best.score:
                best.fusion_k, best.dense_weight, best.score = k, weight, score
    log(
        f"[tune] {objective_name}: fusion k={best.fusion_k} w_dense={best.dense_weight} -> "
        f"{best.score:.4f}"
    )
    return best


# -- baselines --------------------------------------------------------------------------------


def run_plain(retriever, queries: dict[str, str], depth: int) -> dict[str, list[str]]:
    """Runs of a retriever that takes no per-call ``k`` (EnsembleRetriever), cut to ``depth``."""
    return {qid: ranked_doc_ids(retriever.invoke(text))[:depth] for qid, text in queries.items()}


def alias_truncations(cache: EmbeddingCache, scorer, texts: list[str]) -> int:
    """Let the cache serve the reranker's truncated texts: a text cut to the model's token budget
    reads as the same word pieces the model keeps of the full text (up to the last piece)."""
    budget = scorer.budget
    truncate = getattr(scorer, "_truncate", None)
    if budget is None or truncate is None:
        return 0
    counts = scorer.count_tokens(texts)
    aliased = 0
    for text, count in zip(texts, counts, strict=True):
        if count > budget:
            cache.alias(truncate(text, budget), text)
            aliased += 1
    return aliased


def compared_rows(config, work: Path, collection: str, queries: dict[str, str], depth: int, add):
    """The side-by-side rows on held-out ``queries``: each single retriever of the shipped
    defaults, dense with one vector per document, the fused graph at the shipped defaults, the
    previous default, and ``EnsembleRetriever`` over the shipped retriever objects. ``add(label,
    runs, kind)`` scores and records a row. Returns the shipped single retrievers."""
    singles = single_retrievers(config, work)
    add("BM25 (bm25s, english analyzer)", run_retriever(singles[LEX], queries, depth), "single")
    add(dense_label(), run_retriever(singles[DENSE], queries, depth), "single")
    previous = parse_config(
        pipeline(work, collection, depth=depth, fusion=PREVIOUS_FUSION, passages=ONE_VECTOR)
    )
    if passages_by_default():
        dense = single_retrievers(previous, work)[DENSE]
        add(dense_label(ONE_VECTOR), run_retriever(dense, queries, depth), "single")
    add(shipped_label(), run_graph(build_graph(config, base_dir=work), queries, depth), "fused")
    graph = build_graph(previous, base_dir=work)
    add(PREVIOUS_LABEL, run_graph(graph, queries, depth), "fused-previous")
    add(ENSEMBLE_LABEL, run_plain(ensemble_of(singles), queries, depth), "ensemble")
    return singles


def tuned_rows(work: Path, collection: str, tuned: Tuned, queries, depth: int, add) -> None:
    """BM25 at the tuned ``k1``/``b`` and the fused graph at the tuned RRF (shipped dense)."""
    config = parse_config(
        pipeline(work, collection, depth=depth, k1=tuned.k1, b=tuned.b, fusion=tuned_fusion(tuned))
    )
    add(
        f"BM25 tuned (k1={tuned.k1}, b={tuned.b})",
        run_retriever(single_retrievers(config, work)[LEX], queries, depth),
        "single-tuned",
    )
    add(
        tuned_label(tuned),
        run_graph(build_graph(config, base_dir=work), queries, depth),
        "fused-tuned",
    )


def row_recorder(rows: list[dict[str, Any]], qrels, name: str, log):
    """``add(label, runs, kind)`` for ``compared_rows``: scores ``runs`` on a judged-document
    collection (nDCG@10, R@100), appends the row to ``rows`` and logs it."""

    def add(label: str, runs: dict[str, list[str]], kind: str) -> None:
        scores = score_runs(runs, qrels, SCIFACT_MEASURES)
        rows.append({"config": label, "kind": kind, **scores})
        log(f"[{name}] {label}: " + " ".join(f"{m}={v:.4f}" for m, v in scores.items()))

    return add


# -- SciFact -------------------------------------------------------------------------------------


def scifact(
    test,
    train,
    cache: EmbeddingCache,
    work: Path,
    config,
    *,
    depth: int = 100,
    rerank: bool = True,
    log=print,
) -> dict[str, Any]:
    """Quality on SciFact test; settings tuned on train. ``test``/``train`` are BeirCollections
    (same corpus); ``config`` is what ``build_indexes`` returned for ``work``."""
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    add = row_recorder(rows, test.qrels, "scifact", log)

    singles = compared_rows(config, work, "scifact", test.queries, depth, add)

    # tuning on train (never on test)
    train_dense = run_retriever(singles[DENSE], train.queries, depth)

    def train_ndcg(runs):
        return score_runs(runs, train.qrels, ["nDCG@10"])["nDCG@10"]

    tuned = tune(
        train.corpus, train.queries, train_dense, train_ndcg, "SciFact train nDCG@10", depth, log
    )
    tuned_rows(work, "scifact", tuned, test.queries, depth, add)

    rerank_note = None
    if rerank:
        rerank_note = _with_rerank(test, cache, work, depth, add, log)

    return {
        "rows": rows,
        "tuned": tuned.as_dict(),
        "queries": len(test.queries),
        "docs": len(test.corpus),
        "depth": depth,
        "rerank_note": rerank_note,
        "seconds": time.perf_counter() - started,
    }


def untuned(collection, name: str, work: Path, config, *, depth: int = 100, log=print):
    """Quality on a collection no setting was tuned on (``collection`` a BeirCollection; every
    judged query): the shipped defaults beside each single retriever, the previous default and
    ``EnsembleRetriever`` (``compared_rows``), so "fused >= every single" is checked where
    nothing could have been fitted to it."""
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    add = row_recorder(rows, collection.qrels, name, log)

    compared_rows(config, work, name, collection.queries, depth, add)
    return {
        "rows": rows,
        "queries": len(collection.queries),
        "docs": len(collection.corpus),
        "depth": depth,
        "seconds": time.perf_counter() - started,
    }


def _with_rerank(test, cache, work, depth, add, log) -> str:
    from parallel_rag.nodes.rerank.scorers import EmbeddingSimilarityScorer

    reranker = {"kind": "embedding", "overflow": "truncate", "max_candidates": 50}
    scorer = EmbeddingSimilarityScorer(overflow="truncate").prepare()
    aliased = alias_truncations(cache, scorer, [doc_text(d) for d in test.corpus.values()])
    config = parse_config(pipeline(work, "scifact", depth=depth, reranker=reranker))
    graph = build_graph(config, base_dir=work)
    add(
        "fused graph, shipped defaults + embedding rerank (MiniLM cosine, first 50 per branch)",
        run_graph(graph, test.queries, depth),
        "fused-rerank",
    )
    note = (
        f"embedding reranker (kind: embedding, overflow: truncate, max_candidates: 50): "
        f"{aliased} abstracts exceed the model's {scorer.budget}-token budget and are truncated. "
        "No cross-encoder weights ship with the project or are cached here, so "
        "kind: cross_encoder was not run."
    )
    log(f"[scifact] {note}")
    return note


def bm25_engine_table(collection, log=print) -> list[dict[str, Any]]:
    """nDCG@10 of both analyzers on both engines (the engines must rank identically)."""
    chunks = [(c.id, c.content, c.metadata) for c in corpus_chunks(collection.corpus)]
    rows = []
    for analyzer in get_args(AnalyzerName):
        index = BM25Index.from_chunks(chunks, analyzer=analyzer)
        for engine in ENGINES:
            scored = index.with_engine(engine)
            started = time.perf_counter()
            runs = bm25_runs(scored, collection.queries, 10)
            seconds = time.perf_counter() - started
            ndcg = score_runs(runs, collection.qrels, ["nDCG@10"])["nDCG@10"]
            rows.append(
                {
                    "analyzer": analyzer,
                    "engine": engine,
                    "nDCG@10": ndcg,
                    "ms_per_query": 1000 * seconds / max(len(collection.queries), 1),
                }
            )
            log(f"[bm25-engines] {analyzer}/{engine}: nDCG@10={ndcg:.4f}")
    return rows


# -- HotpotQA --------------------------------------------------------------------------------


def hotpotqa(
    data: HotpotQA,
    cache: EmbeddingCache,
    work: Path,
    config,
    *,
    depth: int = 100,
    tune_questions: int = HOTPOT_TUNE,
    limit: int | None = None,
    rewriters: Callable[..., list[dict]] | None = None,
    log=print,
) -> dict[str, Any]:
    started = time.perf_counter()
    tune_set, report_set = data.split(tune_questions)
    if limit is not None:
        report_set = report_set[:limit]
    queries = {q["_id"]: q["question"] for q in report_set}
    rows: list[dict[str, Any]] = []

    def add(name: str, runs: dict[str, list[str]], kind: str) -> None:
        metrics = hotpot_metrics(runs, report_set, data.corpus)
        rows.append({"config": name, "kind": kind, **metrics})
        log(
            f"[hotpotqa] {name}: "
            + " ".join(f"{m}={v:.4f}" for m, v in metrics.items() if m != "answerable")
        )

    singles = compared_rows(config, work, "hotpotqa", queries, depth, add)

    tune_queries = {q["_id"]: q["question"] for q in tune_set}
    tune_dense = run_retriever(singles[DENSE], tune_queries, depth)

    def tune_allsupport(runs):
        return hotpot_metrics(runs, tune_set, data.corpus)["AllSupport@10"]

    tuned = tune(
        data.corpus,
        tune_queries,
        tune_dense,
        tune_allsupport,
        f"HotpotQA first {tune_questions} AllSupport@10",
        depth,
        log,
    )
    tuned_rows(work, "hotpotqa", tuned, queries, depth, add)

    rewriter_rows: list[dict[str, Any]] = []
    if rewriters is not None:
        rewriter_rows = rewriters(
            config=config,
            work=work,
            report_set=report_set,
            corpus=data.corpus,
            metrics=hotpot_metrics,
            log=log,
        )
    return {
        "rows": rows,
        "rewriter_rows": rewriter_rows,
        "tuned": tuned.as_dict(),
        "questions": len(report_set),
        "tune_questions": len(tune_set),
        "docs": len(data.corpus),
        "depth": depth,
        "seconds": time.perf_counter() - started,
    }
