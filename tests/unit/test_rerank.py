"""Reranking without model weights.

Config validation, trained-exit checks on config-only model folders (refused at build time,
before any weights exist to load), the candidate budget, token-budget refusals through
``on_failure``, and a missing model. Real-model behaviour is in tests/integration/test_rerank_*.
"""

from __future__ import annotations

import json

import pytest
from fake_scorer import FakeScorer
from parallel_rag.graph import build_graph
from parallel_rag.graph.configuration import DEFAULT_RERANK_CANDIDATES, ConfigError, RerankerConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.rerank.cross_encoder import (
    EXITS_FILE,
    ModelFormatError,
    ModelShape,
    check_exit,
    declared_exits,
)
from parallel_rag.nodes.rerank.node import make_rerank_node, rerank_hits
from parallel_rag.nodes.rerank.scorers import (
    ExitNotTrainedError,
    QueryOverBudgetError,
    TokenBudgetError,
    cosine_scores,
)

TWO = [{"name": "a", "backend": "bm25"}, {"name": "b", "backend": "bm25"}]
SHAPE = ModelShape(depth=6, width=384, positions=512)


def graph_with(retrievers, scorer, **reranker):
    return build_graph(
        {"retrievers": [], "reranker": {"kind": "embedding", **reranker}},
        retrievers=retrievers,
        scorer=scorer,
    )


def five_docs(fakes):
    return [fakes.doc(f"d{i}", f"text {i}", 1.0 - i / 10) for i in range(1, 6)]


def branch_sources(result, retriever):
    found = {}
    for doc in result["documents"]:
        for source in doc["sources"]:
            if source["retriever"] == retriever:
                found[doc["id"]] = source
    return dict(sorted(found.items(), key=lambda item: item[1]["rank"]))


# ---------------------------------------------------------------- configuration


def config_error(reranker) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config({"retrievers": TWO, "reranker": reranker})
    return str(caught.value)


def test_reranker_defaults():
    config = parse_config({"retrievers": TWO, "reranker": {}}).reranker
    assert config.kind == "embedding" and config.model == "bundled"
    assert config.max_candidates == DEFAULT_RERANK_CANDIDATES
    assert config.overflow == "reject" and config.max_tokens is None
    assert (config.layer, config.dimension, config.top_k) == (0, 0, None)


@pytest.mark.parametrize(
    ("reranker", "field"),
    [
        ({"kind": "cross_encoder"}, "reranker.model"),
        ({"kind": "cross_encoder", "model": "bundled"}, "reranker.model"),
        ({"kind": "embedding", "layer": 3}, "reranker.layer"),
        ({"kind": "embedding", "dimension": 128}, "reranker.dimension"),
        ({"kind": "cross_encoder", "model": "m", "layer": -1}, "reranker.layer"),
        ({"max_candidates": 0}, "reranker.max_candidates"),
        ({"max_tokens": 0}, "reranker.max_tokens"),
        ({"overflow": "cut"}, "reranker.overflow"),
        ({"batch_size": 0}, "reranker.batch_size"),
        ({"pair_scorer": {"layer": 1}}, "reranker.pair_scorer"),
    ],
)
def test_bad_reranker_settings_are_refused_naming_the_field(reranker, field):
    assert field in config_error(reranker)


def test_relative_model_path_starts_at_the_config_directory(tmp_path):
    (tmp_path / "models" / "ce").mkdir(parents=True)
    config = RerankerConfig(kind="cross_encoder", model="models/ce")
    assert config.relative_to(tmp_path).model == str(tmp_path / "models" / "ce")
    hub = RerankerConfig(kind="cross_encoder", model="cross-encoder/ms-marco-MiniLM-L6-v2")
    assert hub.relative_to(tmp_path).model == "cross-encoder/ms-marco-MiniLM-L6-v2"


# ---------------------------------------------------------------- trained exits


@pytest.mark.parametrize(
    ("layer", "dimension", "exits", "resolved"),
    [
        (0, 0, [], (6, 384)),
        (6, 384, [], (6, 384)),  # explicit full depth/width needs no declaration
        (3, 0, [(3, 384)], (3, 384)),
        (3, 384, [(3, 0)], (3, 384)),  # 0 in the file also means full
        (0, 192, [(0, 192)], (6, 192)),
        (3, 192, [(3, 384), (3, 192)], (3, 192)),
    ],
)
def test_trained_exits_are_accepted(layer, dimension, exits, resolved):
    assert check_exit(layer, dimension, SHAPE, exits) == resolved


@pytest.mark.parametrize(
    ("layer", "dimension", "exits", "field", "says"),
    [
        (3, 0, [], "layer", "only full depth and width"),
        (4, 0, [(3, 384)], "layer", "not a trained exit"),
        (0, 192, [(3, 192)], "dimension", "not a trained exit"),
        (3, 192, [(3, 384), (6, 192)], "dimension", "not a trained exit"),
        (7, 0, [(7, 384)], "layer", "deeper than the model"),
        (0, 512, [], "dimension", "wider than the model"),
    ],
)
def test_untrained_exits_are_refused_naming_the_field(layer, dimension, exits, field, says):
    with pytest.raises(ExitNotTrainedError, match=says) as caught:
        check_exit(layer, dimension, SHAPE, exits)
    assert caught.value.field == field


def test_exits_file_is_read_and_checked(tmp_path):
    assert declared_exits(str(tmp_path)) == []
    (tmp_path / EXITS_FILE).write_text(json.dumps({"exits": [{"layer": 3, "dimension": 0}]}))
    assert declared_exits(str(tmp_path)) == [(3, 0)]
    (tmp_path / EXITS_FILE).write_text(json.dumps({"exits": [{"layer": "3"}]}))
    with pytest.raises(ModelFormatError, match=EXITS_FILE):
        declared_exits(str(tmp_path))


def config_only_model(folder, exits=None):
    """A cross-encoder folder with a config and no weights: enough for the exit check."""
    from transformers import BertConfig

    folder.mkdir(parents=True, exist_ok=True)
    BertConfig(num_hidden_layers=6, hidden_size=384, num_attention_heads=12).save_pretrained(folder)
    if exits is not None:
        (folder / EXITS_FILE).write_text(json.dumps({"exits": exits}))
    return folder


@pytest.mark.parametrize(
    ("setting", "field"),
    [({"layer": 4}, "reranker.layer"), ({"layer": 3, "dimension": 100}, "reranker.dimension")],
)
def test_untrained_exit_fails_build_graph_before_any_weights_load(tmp_path, corpus, setting, field):
    model = config_only_model(tmp_path / "ce", exits=[{"layer": 3, "dimension": 384}])
    reranker = {"kind": "cross_encoder", "model": str(model), **setting}
    with pytest.raises(ConfigError, match=field):
        build_graph({"retrievers": [], "reranker": reranker}, retrievers=corpus(2))


def test_bad_exits_file_fails_build_graph_naming_the_model(tmp_path, corpus):
    model = config_only_model(tmp_path / "ce", exits=[{"layer": "three"}])
    reranker = {"kind": "cross_encoder", "model": str(model)}
    with pytest.raises(ConfigError, match="reranker.model"):
        build_graph({"retrievers": [], "reranker": reranker}, retrievers=corpus(2))


# ---------------------------------------------------------------- missing model: on_failure


def test_missing_model_builds_and_then_follows_on_failure(tmp_path, corpus, caplog):
    reranker = {"kind": "cross_encoder", "model": str(tmp_path / "nowhere")}
    graph = build_graph({"retrievers": [], "reranker": reranker}, retrievers=corpus(2))
    assert "reranker model unavailable" in caplog.text
    result = graph.invoke({"query": "capital"})
    assert len(result["warnings"]) == 2
    assert all("not found" in w and "kept retrieval order" in w for w in result["warnings"])
    assert [d["id"] for d in result["documents"]] == ["paris", "berlin"]

    blocking = {"retrievers": [], "reranker": {**reranker, "on_failure": "block"}}
    with pytest.raises(BlockedError, match="not found"):
        build_graph(blocking, retrievers=corpus(2)).invoke({"query": "capital"})


# ---------------------------------------------------------------- candidate budget


def test_only_the_first_max_candidates_are_scored(fakes):
    scorer = FakeScorer({"text 2": 0.9, "text 1": 0.1, "text 5": 5.0})
    docs = five_docs(fakes)
    retrievers = {"a": fakes.ListRetriever(docs=docs), "b": fakes.ListRetriever(docs=docs[:1])}
    result = graph_with(retrievers, scorer, max_candidates=2).invoke({"query": "q"})
    assert sorted(scorer.calls) == [("q", ["text 1"]), ("q", ["text 1", "text 2"])]
    a = branch_sources(result, "a")
    # the scored head is reordered; the unscored tail follows in retrieval order, unscored
    assert list(a) == ["d2", "d1", "d3", "d4", "d5"]
    assert [s.get("rerank_score") for s in a.values()] == [
        pytest.approx(0.9),
        pytest.approx(0.1),
        None,
        None,
        None,
    ]
    assert [s["score"] for s in a.values()] == [0.8, 0.9, 0.7, 0.6, 0.5]


def test_top_k_applies_after_the_candidate_budget(fakes):
    hits = fakes.branch_result(0, "a", 0, [(f"d{i}", i, 1.0) for i in range(1, 6)])["hits"]
    kept = rerank_hits(hits, [0.1, 0.2, 0.3], top_k=4, max_candidates=3)
    assert [(h["id"], h["rank"], "rerank_score" in h) for h in kept] == [
        ("d3", 1, True),
        ("d2", 2, True),
        ("d1", 3, True),
        ("d4", 4, False),
    ]
    with pytest.raises(ValueError, match="3 documents"):
        rerank_hits(hits, [0.1] * 5, top_k=None, max_candidates=3)


def test_numpy_scores_are_accepted_and_recorded_as_floats(fakes):
    node = make_rerank_node(
        FakeScorer({"text 3": 2.0}, as_numpy=True), top_k=None, on_failure="block"
    )
    branch = fakes.branch_result(0, "a", 0, [("x", 1, 1.0), ("y", 2, 0.5)])
    branch["hits"][1]["content"] = "text 3"
    update = node({"result": branch, "query": "q"})
    (result,) = update["branch_results"]
    assert [h["id"] for h in result["hits"]] == ["y", "x"]
    assert all(type(h["rerank_score"]) is float for h in result["hits"])
    assert result["rerank_ms"] >= 0 and update["timings"]["rerank"] == result["rerank_ms"]


# ---------------------------------------------------------------- token budget refusals


REFUSAL = TokenBudgetError("query + document + special tokens", [(2, 612), (6, 700)], 512, 8)


def test_budget_refusal_message_names_ranks_tokens_and_budget():
    text = str(REFUSAL)
    assert "2 of 8 candidates exceed max_tokens 512" in text
    assert "rank 3 (612 tokens)" in text and "rank 7 (700 tokens)" in text
    assert "without truncating" in text
    assert "query alone uses 600 of max_tokens 512" in str(QueryOverBudgetError(600, 512))


@pytest.mark.parametrize("policy", ["skip", "warn", "block"])
def test_budget_refusal_follows_on_failure(fakes, policy):
    scorer = FakeScorer(fail=REFUSAL)
    docs = five_docs(fakes)
    retrievers = {"a": fakes.ListRetriever(docs=docs), "b": fakes.ListRetriever(docs=docs)}
    graph = graph_with(retrievers, scorer, on_failure=policy)
    if policy == "block":
        with pytest.raises(BlockedError, match="max_tokens 512"):
            graph.invoke({"query": "q"})
        return
    result = graph.invoke({"query": "q"})
    assert list(branch_sources(result, "a")) == ["d1", "d2", "d3", "d4", "d5"]  # untouched
    if policy == "skip":
        assert result["warnings"] == []
    else:
        assert len(result["warnings"]) == 2
        assert all("max_tokens 512" in w and "rank 3" in w for w in result["warnings"])
    assert all(b["rerank_ms"] is not None for b in result["branches"])


def test_cosine_scores():
    scores = cosine_scores([1.0, 0.0], [[2.0, 0.0], [0.0, 3.0], [0.0, 0.0], [-1.0, 0.0]])
    assert scores == pytest.approx([1.0, 0.0, 0.0, -1.0])
