"""Reciprocal rank fusion (DESIGN §4 Fusion): arithmetic, weights, duplicates, ties, top_k."""

from __future__ import annotations

import random

import pytest
from parallel_rag.graph import build_graph
from parallel_rag.nodes.fuse import (
    DEFAULT_RRF_K,
    branch_records,
    reciprocal_rank_fusion,
    views_used,
)


@pytest.fixture
def br(fakes):
    return fakes.branch_result


def by_id(fused):
    return {d["id"]: d for d in fused}


def test_default_k_is_60():
    assert DEFAULT_RRF_K == 60


def test_exact_rrf_arithmetic_with_one_based_ranks(br):
    branches = [
        br(0, "lex", 0, [("a", 1), ("b", 2), ("c", 3)]),
        br(0, "dense", 1, [("b", 1), ("a", 4)]),
    ]
    fused = by_id(reciprocal_rank_fusion(branches))
    assert fused["a"]["fused_score"] == pytest.approx(1 / 61 + 1 / 64, abs=0, rel=1e-12)
    assert fused["b"]["fused_score"] == pytest.approx(1 / 62 + 1 / 61, abs=0, rel=1e-12)
    assert fused["c"]["fused_score"] == pytest.approx(1 / 63, abs=0, rel=1e-12)
    ordered = [d["id"] for d in reciprocal_rank_fusion(branches)]
    assert ordered == ["b", "a", "c"]  # b: 1/61+1/62 > a: 1/61+1/64 > c
    assert [d["fused_rank"] for d in reciprocal_rank_fusion(branches)] == [1, 2, 3]


def test_custom_k(br):
    branches = [br(0, "lex", 0, [("a", 1), ("b", 2)]), br(0, "dense", 1, [("a", 2)])]
    fused = by_id(reciprocal_rank_fusion(branches, k=1))
    assert fused["a"]["fused_score"] == pytest.approx(1 / 2 + 1 / 3)
    assert fused["b"]["fused_score"] == pytest.approx(1 / 3)


def test_weights_per_retriever_default_one(br):
    branches = [
        br(0, "lex", 0, [("a", 1)]),
        br(0, "dense", 1, [("a", 1), ("b", 2)]),
        br(1, "dense", 1, [("b", 1)], view_kind="rewrite"),
    ]
    fused = by_id(reciprocal_rank_fusion(branches, k=10, weights={"dense": 3.0}))
    assert fused["a"]["fused_score"] == pytest.approx(1.0 / 11 + 3.0 / 11)
    assert fused["b"]["fused_score"] == pytest.approx(3.0 / 12 + 3.0 / 11)


def test_zero_weight_contributes_nothing_but_keeps_the_source(br):
    branches = [br(0, "lex", 0, [("a", 1)]), br(0, "dense", 1, [("a", 1)])]
    (doc,) = reciprocal_rank_fusion(branches, weights={"lex": 0.0})
    assert doc["fused_score"] == pytest.approx(1 / 61)
    assert [s["retriever"] for s in doc["sources"]] == ["lex", "dense"]


@pytest.mark.parametrize("k", [0, -1, -60])
def test_k_must_be_positive(br, k):
    with pytest.raises(ValueError, match="k"):
        reciprocal_rank_fusion([br(0, "lex", 0, [("a", 1)])], k=k)


def test_duplicates_keep_first_copy_in_view_then_retriever_order(br):
    branches = [
        br(0, "lex", 0, [("x", 2), ("only-lex", 1)]),
        br(0, "dense", 1, [("x", 1)]),
        br(1, "lex", 0, [("x", 1)], view_kind="rewrite"),
        br(1, "dense", 1, [("x", 3)], view_kind="rewrite"),
    ]
    expected = reciprocal_rank_fusion(branches)
    first_copy = branches[0]["hits"][0]
    rng = random.Random(1234)
    for _ in range(10):
        shuffled = list(branches)
        rng.shuffle(shuffled)
        fused = reciprocal_rank_fusion(shuffled)
        assert fused == expected
        x = by_id(fused)["x"]
        assert x["content"] == first_copy["content"]
        assert x["metadata"] == {"from": "q0:lex"}
        assert [(s["view"], s["retriever"]) for s in x["sources"]] == [
            ("view 0", "lex"),
            ("view 0", "dense"),
            ("view 1", "lex"),
            ("view 1", "dense"),
        ]


def test_every_source_listed_with_its_branch_view_retriever_rank_score(br):
    branches = [
        br(0, "lex", 0, [("a", 1, 7.5), ("b", 2, 3.0)], view="original q"),
        br(1, "dense", 1, [("a", 3, 0.42)], view="rewritten q", view_kind="rewrite"),
    ]
    a = by_id(reciprocal_rank_fusion(branches))["a"]
    assert a["sources"] == [
        {
            "branch": "q0:lex",
            "view": "original q",
            "view_kind": "original",
            "retriever": "lex",
            "rank": 1,
            "score": 7.5,
        },
        {
            "branch": "q1:dense",
            "view": "rewritten q",
            "view_kind": "rewrite",
            "retriever": "dense",
            "rank": 3,
            "score": 0.42,
        },
    ]
    assert set(a) == {"id", "content", "metadata", "fused_score", "fused_rank", "sources"}


def test_rerank_score_is_carried_into_sources(br):
    branch = br(0, "lex", 0, [("a", 1, 2.0)])
    branch["hits"][0]["rerank_score"] = 0.8
    (doc,) = reciprocal_rank_fusion([branch, br(0, "dense", 1, [("a", 1, 0.3)])])
    assert doc["sources"][0]["rerank_score"] == 0.8
    assert "rerank_score" not in doc["sources"][1]


def test_tie_broken_by_best_rank_before_first_appearance(br):
    # k=1: y appears twice at rank 3 (1/4 + 1/4), x once at rank 1 (1/2): an exact float tie.
    # y is seen first, but x's best rank (1) is better than y's (3), so x wins.
    branches = [
        br(0, "lex", 0, [("f1", 1), ("f2", 2), ("y", 3)]),
        br(0, "dense", 1, [("x", 1)]),
        br(1, "lex", 0, [("g1", 1), ("g2", 2), ("y", 3)], view_kind="rewrite"),
    ]
    fused = reciprocal_rank_fusion(branches, k=1)
    scores = by_id(fused)
    assert scores["x"]["fused_score"] == scores["y"]["fused_score"] == 0.5
    order = [d["id"] for d in fused]
    assert order.index("x") < order.index("y")
    # the equal-scored, equal-best-rank f1/x/g1 (all 1/2, rank 1) go by first appearance
    assert order[:4] == ["f1", "x", "g1", "y"]


def test_tie_with_equal_best_rank_goes_to_first_appearance_regardless_of_input_order(br):
    in_order = [br(0, "lex", 0, [("lex-doc", 1)]), br(0, "dense", 1, [("dense-doc", 1)])]
    arrived = list(reversed(in_order))  # parallel writes: arrival order is irrelevant
    assert [d["id"] for d in reciprocal_rank_fusion(arrived)] == ["lex-doc", "dense-doc"]


def test_top_k_cuts_after_ranking(br):
    branches = [br(0, "lex", 0, [("a", 1), ("b", 2), ("c", 3), ("d", 4)])]
    fused = reciprocal_rank_fusion(branches, top_k=2)
    assert [d["id"] for d in fused] == ["a", "b"]
    assert [d["fused_rank"] for d in fused] == [1, 2]
    assert len(reciprocal_rank_fusion(branches)) == 4


def test_hits_out_of_rank_order_are_read_by_rank(br):
    branch = br(0, "lex", 0, [("b", 2), ("a", 1)])
    assert [d["id"] for d in reciprocal_rank_fusion([branch])] == ["a", "b"]


def test_failed_and_empty_branches_add_nothing(br):
    failed = br(0, "dense", 1, [])
    failed.update(status="failed", error="RuntimeError: down")
    fused = reciprocal_rank_fusion([br(0, "lex", 0, [("a", 1)]), failed, br(1, "x", 2, [])])
    assert [d["id"] for d in fused] == ["a"]


def test_branch_records_and_views_are_in_view_then_retriever_order(br):
    branches = [
        br(1, "dense", 1, [("a", 1)], view="v1", view_kind="rewrite"),
        br(0, "dense", 1, [], view="v0"),
        br(1, "lex", 0, [("a", 1), ("b", 2)], view="v1", view_kind="rewrite"),
        br(0, "lex", 0, [("a", 1)], view="v0"),
    ]
    records = branch_records(branches)
    assert [r["branch"] for r in records] == ["q0:lex", "q0:dense", "q1:lex", "q1:dense"]
    assert [r["hits"] for r in records] == [1, 0, 2, 1]
    assert [r["status"] for r in records] == ["ok", "empty", "ok", "ok"]
    assert views_used(branches) == [
        {"text": "v0", "kind": "original"},
        {"text": "v1", "kind": "rewrite"},
    ]


def test_config_fusion_k_and_weights_change_the_fused_score(fakes):
    def retrievers():
        return {
            "a": fakes.ListRetriever(docs=[fakes.doc("d", "Shared document text.", 1.0)]),
            "b": fakes.ListRetriever(docs=[fakes.doc("d", "Shared document text.", 2.0)]),
        }

    default = build_graph({"retrievers": []}, retrievers=retrievers()).invoke("shared text")
    assert default["documents"][0]["fused_score"] == pytest.approx(2 / 61)

    tuned = build_graph(
        {"retrievers": [], "fusion": {"k": 10, "weights": {"a": 2.0, "b": 0.5}}},
        retrievers=retrievers(),
    ).invoke("shared text")
    (doc,) = tuned["documents"]
    assert doc["fused_score"] == pytest.approx(2.0 / 11 + 0.5 / 11)
    assert [(s["retriever"], s["score"]) for s in doc["sources"]] == [("a", 1.0), ("b", 2.0)]
