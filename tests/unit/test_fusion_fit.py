"""Fusion fitted to the corpus (studio/fusion_fit.py, graph/fitted_fusion.py): pseudo-queries
taken out of their chunks, the choice against the shipped default, the record written beside
the stores, and the order a run's fusion is chosen in: run knobs, then the configuration's
``fusion:`` block, then the fit, then the shipped default (with a note saying why)."""

from __future__ import annotations

import json
import random

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.base import SCORE_KEY
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.fitted_fusion import (
    FIT_FILE,
    FIT_VERSION,
    NOT_FITTED,
    fit_path,
    plan_from_record,
    write_fit,
)
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.fuse import FusionPlan
from parallel_rag.studio.fusion_fit import (
    OUTSIDE_SPARE,
    SHIPPED,
    Candidate,
    choose,
    fit_fusion,
    ndcg_at_10,
    outside_hits,
    pseudo_queries,
    pseudo_query_of,
    score_candidates,
    single_branch_scores,
)
from parallel_rag.studio.ingestion import ingest_paths

TOPICS = 60


def two_bm25(tmp_path, fusion=None):
    config = {
        "retrievers": [
            {"name": "a", "backend": "bm25", "backend_config": {"index_path": "idx/a"}},
            {"name": "b", "backend": "bm25", "backend_config": {"index_path": "idx/b", "k1": 0.9}},
        ],
        "generator": {"kind": "extractive", "min_similarity": None},
    }
    if fusion is not None:
        config["fusion"] = fusion
    return parse_config(config)


def write_corpus(folder, files: int, seed: int = 1):
    """``files`` text files, each on one of ``TOPICS`` topics: three sentences drawn from the
    topic's own words and common ones, so a sentence's topic words find its file's others."""
    rng = random.Random(seed)
    common = [f"common{i}" for i in range(40)]
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        topic = [f"topic{n % TOPICS}word{i}" for i in range(12)]
        sentences = []
        for _ in range(3):
            words = rng.sample(topic, 4) + rng.sample(common, 5)
            rng.shuffle(words)
            sentences.append(" ".join(words).capitalize() + ".")
        (folder / f"doc{n:04d}.txt").write_text(" ".join(sentences) + "\n", encoding="utf-8")


def test_a_pseudo_query_is_taken_out_of_its_chunk():
    text = "Title line\nThe first sentence says one thing here. The second one says another thing."
    query, taken, edited = pseudo_query_of(text, random.Random(0))
    first, second = "The first sentence says one thing here.", "The second one says another thing."
    assert taken in (first, second) and taken not in edited and "Title line" in edited
    assert set(query.split()) <= set(taken.split()) and len(query.split()) <= 6
    assert "the" not in query.lower().split()  # content words only


def test_a_chunk_of_one_long_sentence_gives_a_third_of_its_words():
    words = [f"w{i}" for i in range(30)]
    query, taken, edited = pseudo_query_of(" ".join(words), random.Random(0))
    assert len(taken.split()) == 10 and taken not in edited and len(edited.split()) == 20
    assert set(query.split()) <= set(taken.split())


def test_a_short_chunk_gives_no_pseudo_query():
    assert pseudo_query_of("Too short to ask about.", random.Random(0)) is None


def test_an_overlapping_sibling_holding_the_query_is_an_answer_too():
    shared = "Overlapping chunks share this whole sentence verbatim."
    chunks = [
        ("c1", f"The first chunk begins here with words. {shared}", {"file_id": "f"}),
        ("c2", f"{shared} The second chunk goes on after it.", {"file_id": "f"}),
        ("c3", f"Another file has {shared.lower()}", {"file_id": "g"}),
    ]
    made = pseudo_queries(chunks, 10, seed=3)
    for q in made:
        if q.passage == shared:
            assert q.relevant == {"c1", "c2"}  # not c3: another file, and not verbatim
    assert [q.target for q in made] == [q.target for q in pseudo_queries(chunks, 10, seed=3)]


def test_ndcg_at_10_matches_the_definition():
    assert ndcg_at_10(["x", "a"], {"a": 1.0}) == pytest.approx(1 / 1.584962500721156)
    assert ndcg_at_10(["a"], {"a": 1.0}) == 1.0
    assert ndcg_at_10([f"x{i}" for i in range(10)] + ["a"], {"a": 1.0}) == 0.0


def test_the_dense_weight_follows_the_branch_that_finds_the_answers():
    # the dense branch ranks each answer 1st, the lexical one 5th: more dense weight wins
    runs = []
    for n in range(20):
        lexical = [(f"l{n}-{i}", 10.0 - i) for i in range(4)] + [(f"ans{n}", 6.0)]
        dense = [(f"ans{n}", 0.9)] + [(f"d{n}-{i}", 0.8 - i / 10) for i in range(4)]
        runs.append(({"lexical": lexical, "dense": dense}, {f"ans{n}": 1.0}))
    low, high = Candidate("minmax", 0.25), Candidate("minmax", 3.0)
    scores = score_candidates(runs, ["dense"], [low, high, SHIPPED])
    assert sum(scores[high]) > sum(scores[low])
    assert choose(scores) == high


def test_the_shipped_default_stays_unless_beaten_by_the_margin():
    scores = {SHIPPED: [0.5, 0.5], Candidate("zscore", 0.5): [0.505, 0.505]}
    assert choose(scores, margin=0.01) == SHIPPED
    assert choose(scores, margin=0.001) == Candidate("zscore", 0.5)
    # branches alone below the default: the margin still keeps it
    assert choose(scores, margin=0.01, singles={"a": [0.4, 0.4]}) == SHIPPED


def test_the_margin_does_not_keep_a_default_that_loses_to_one_of_its_branches():
    # the dense branch ranks every answer 1st; the lexical one 3rd; the shipped default, which
    # weights lexical 1 against dense 0.75, ranks the answer 2nd: below dense alone
    runs = []
    for n in range(30):
        lexical = [(f"l{n}-0", 10.0), (f"l{n}-1", 9.9), (f"ans{n}", 7.0)]
        lexical += [(f"l{n}-{i}", 5.0 - i / 10) for i in range(2, 8)]
        dense = [(f"ans{n}", 0.62), (f"l{n}-0", 0.4)]
        dense += [(f"d{n}-{i}", 0.3 - i / 100) for i in range(7)]
        runs.append(({"lexical": lexical, "dense": dense}, {f"ans{n}": 1.0}))
    candidates = [SHIPPED, Candidate("minmax", 1.25), Candidate("minmax", 1.5)]
    scores = score_candidates(runs, ["dense"], candidates)
    singles = single_branch_scores(runs, ["lexical", "dense"])
    mean = {c: sum(v) / len(v) for c, v in scores.items()}
    assert mean[SHIPPED] < sum(singles["dense"]) / len(runs) == 1.0
    best = max(mean, key=mean.get)
    assert mean[best] < mean[SHIPPED] + 1.0  # a margin of 1 would keep the default ...
    chosen = choose(scores, margin=1.0, singles=singles)
    assert chosen == best != SHIPPED  # ... were it not below the dense branch alone
    assert mean[chosen] >= sum(singles["dense"]) / len(runs)


def record(**over):
    base = {
        "version": FIT_VERSION,
        "fitted_at": "2026-12-05T08:00:00+00:00",
        "retrievers": {"a": "lexical", "b": "lexical"},
        "status": "fitted",
        "settings": {"method": "zscore", "weights": {"a": 1.0, "b": 3.0}},
        "evidence": {"pseudo_queries": 200, "chosen_score": 0.7, "default_score": 0.6},
    }
    return {**base, **over}


@pytest.mark.parametrize(
    ("changed", "source", "note"),
    [
        ({}, "fitted", None),
        ({"retrievers": {"a": "lexical", "c": "dense"}}, "default", "other retrievers"),
        ({"version": 0}, "default", "outdated"),
        ({"status": "default", "reason": "corpus too small to fit"}, "default", "too small"),
    ],
)
def test_a_fit_record_applies_only_to_the_retrievers_it_fitted(changed, source, note):
    default = FusionPlan(weights={}, source="default")
    plan = plan_from_record(record(**changed), ["a", "b"], [], default)
    assert plan.source == source
    if source == "fitted":
        assert (plan.method, dict(plan.weights)) == ("zscore", {"a": 1.0, "b": 3.0})
        assert plan.fit["pseudo_queries"] == 200
    else:
        assert note in plan.note and plan.method == "minmax"
    assert plan_from_record(None, ["a", "b"], [], default).note == NOT_FITTED


def test_run_knobs_then_configuration_then_fit_then_default(tmp_path):
    write_corpus(tmp_path / "docs", 30)
    config = two_bm25(tmp_path)
    ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False, fit=False)
    question = {"query": "topic3word1 topic3word2 common4", "top_k": 5}

    graph = build_graph(config, base_dir=tmp_path)
    unfitted = graph.invoke(question)["fusion"]
    assert unfitted["source"] == "default" and unfitted["note"] == NOT_FITTED

    path = fit_path(config, tmp_path)
    assert path == tmp_path / "idx" / FIT_FILE  # beside the stores
    write_fit(path, record())
    fitted = graph.invoke(question)  # the same graph reads the new fit
    assert fitted["fusion"]["source"] == "fitted"
    assert fitted["fusion"]["method"] == "zscore"
    assert fitted["fusion"]["weights"] == {"a": 1.0, "b": 3.0}
    assert fitted["fusion"]["fit"]["fitted_at"] == "2026-12-05T08:00:00+00:00"

    run = graph.invoke(question, context={"fusion_method": "rrf"})["fusion"]
    assert run["source"] == "run" and run["weights"] == {"a": 1.0, "b": 1.0}  # not the fit's

    configured = build_graph(two_bm25(tmp_path, {"method": "dbsf"}), base_dir=tmp_path)
    account = configured.invoke(question)["fusion"]
    assert (account["source"], account["method"]) == ("configuration", "dbsf")


def test_the_fitted_settings_are_the_ones_that_fuse(tmp_path):
    write_corpus(tmp_path / "docs", 30)
    config = two_bm25(tmp_path)
    ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False, fit=False)
    graph = build_graph(config, base_dir=tmp_path)
    question = {"query": "topic7word3 topic8word1 common1", "top_k": 8}

    def fused(result):
        return [(d["id"], round(d["fused_score"], 9)) for d in result["documents"]]

    shipped = fused(graph.invoke(question))
    write_fit(fit_path(config, tmp_path), record())
    same = {"fusion_method": "zscore", "fusion_weights": {"a": 1.0, "b": 3.0}}
    assert fused(graph.invoke(question)) == fused(graph.invoke(question, context=same))
    assert fused(graph.invoke(question)) != shipped


def test_ingest_fits_a_corpus_large_enough_and_says_what_it_chose(tmp_path):
    write_corpus(tmp_path / "docs", 240)
    config = two_bm25(tmp_path)
    report = ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False)
    assert report.fusion.startswith("fusion fitted:"), report.fusion
    saved = json.loads(fit_path(config, tmp_path).read_text())
    assert saved["status"] == "fitted" and saved["retrievers"] == {"a": "lexical", "b": "lexical"}
    evidence = saved["evidence"]
    assert evidence["pseudo_queries"] >= 50 and evidence["chunks"] == 240
    assert evidence["best"] and evidence["default_score"] <= evidence["best"][0]["score"]
    again = ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False)
    assert again.fusion.endswith("(stores unchanged: kept)")


def test_a_corpus_too_small_keeps_the_default_and_says_so(tmp_path):
    write_corpus(tmp_path / "docs", 40)
    config = two_bm25(tmp_path)
    ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False, fit=False)
    report = fit_fusion(config, tmp_path)
    assert report.record["status"] == "default"
    assert "corpus too small to fit: 40 chunks" in report.summary()
    account = build_graph(config, base_dir=tmp_path).invoke({"query": "topic1word1"})["fusion"]
    assert account["source"] == "default" and "too small" in account["note"]


def test_a_configured_fusion_is_not_fitted_at_ingest(tmp_path):
    write_corpus(tmp_path / "docs", 30)
    config = two_bm25(tmp_path, {"method": "rrf"})
    report = ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False)
    assert "set by the configuration" in report.fusion
    assert not fit_path(config, tmp_path).exists()


def test_a_route_preview_shows_the_fitted_settings(tmp_path):
    from parallel_rag.studio.router.preview import fitted_fusion_plan

    config = two_bm25(tmp_path)
    assert fitted_fusion_plan(config, tmp_path)["note"] == NOT_FITTED
    write_fit(fit_path(config, tmp_path), record())
    plan = fitted_fusion_plan(config, tmp_path)
    assert (plan["source"], plan["method"]) == ("fitted", "zscore")
    assert plan["weights"] == {"a": 1.0, "b": 3.0} and "dense_weight" not in plan
    assert plan["fit"]["pseudo_queries"] == 200
    configured = fitted_fusion_plan(two_bm25(tmp_path, {"method": "rrf"}), tmp_path)
    assert (configured["source"], configured["method"], configured["k"]) == (
        "configuration",
        "rrf",
        60,
    )


def test_ingest_leaves_a_large_corpus_to_tune(tmp_path, monkeypatch):
    from parallel_rag.studio import fusion_fit

    monkeypatch.setattr(fusion_fit, "MAX_INGEST_FIT_CHUNKS", 20)
    write_corpus(tmp_path / "docs", 30)
    config = two_bm25(tmp_path)
    report = ingest_paths([tmp_path / "docs"], config, tmp_path, progress=False)
    assert report.fusion.startswith("fusion: not fitted at ingest (30 chunks, over 20")
    assert not fit_path(config, tmp_path).exists()


class RankedStore(BaseRetriever):
    """A store's ranking as a retriever (ids ``c0``, ``c1``, ... best first, scores falling),
    recording the ``k`` each search asks for: how many hits the fit asks of a real store."""

    size: int
    asked: list[int] = []

    def _get_relevant_documents(self, query, *, run_manager, k=10):
        self.asked.append(k)
        hits = range(min(k, self.size))
        return [Document("", id=f"c{i}", metadata={SCORE_KEY: 1 - i / self.size}) for i in hits]


def test_the_fit_asks_a_large_store_for_a_few_more_hits_than_it_keeps():
    store = RankedStore(size=1000)
    few = {f"c{i}": "edited" for i in (0, 3, 500, 700)}  # two of them among the best
    assert [h[0] for h in outside_hits(store, "q", 100, few, 1000)] == [
        f"c{i}" for i in range(102) if i not in (0, 3)
    ]
    assert store.asked == [100 + OUTSIDE_SPARE]
    # every chunk the store ranks first is edited: asked again, for depth + every edited one
    store.asked.clear()
    many = {f"c{i}": "edited" for i in range(150)}
    kept = outside_hits(store, "q", 100, many, 1000)
    assert [h[0] for h in kept] == [f"c{i}" for i in range(150, 250)]
    assert store.asked == [100 + OUTSIDE_SPARE, 100 + 150]
    # a store hardly larger than that is asked for it at once
    store.asked.clear()
    assert len(outside_hits(store, "q", 100, many, 260)) == 100
    assert store.asked == [100 + 150]
