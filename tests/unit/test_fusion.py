"""Fusion: RRF and the normalised-score methods (minmax, zscore, dbsf): arithmetic, weights,
duplicates, ties, top_k, branches without scores, and the config/per-run selection."""

from __future__ import annotations

import random

import pytest
from parallel_rag.graph import build_graph
from parallel_rag.graph.configuration import ConfigError, FusionConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.fuse import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION_K,
    DEFAULT_FUSION_METHOD,
    DEFAULT_RRF_K,
    FLAT_SCORE,
    FUSION_METHODS,
    branch_records,
    branch_scores,
    fuse_branches,
    normalise,
    reciprocal_rank_fusion,
    score_fusion,
    views_used,
)

SCORE_METHODS = [m for m in FUSION_METHODS if m != "rrf"]


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

    rrf = {"retrievers": [], "fusion": {"method": "rrf"}}
    default = build_graph(rrf, retrievers=retrievers()).invoke({"query": "shared text"})
    assert default["documents"][0]["fused_score"] == pytest.approx(2 / 61)

    tuned = build_graph(
        {"retrievers": [], "fusion": {"method": "rrf", "k": 10, "weights": {"a": 2.0, "b": 0.5}}},
        retrievers=retrievers(),
    ).invoke({"query": "shared text"})
    (doc,) = tuned["documents"]
    assert doc["fused_score"] == pytest.approx(2.0 / 11 + 0.5 / 11)
    assert [(s["retriever"], s["score"]) for s in doc["sources"]] == [("a", 1.0), ("b", 2.0)]


def test_a_k_without_a_method_means_rrf(fakes):
    """A config written for RRF (``fusion: {k: 60}``) asks for reciprocal rank fusion, gets it."""
    assert FusionConfig.model_validate({"k": 60}).method == "rrf"
    retrievers = {
        "a": fakes.ListRetriever(docs=[fakes.doc("d", "Shared document text.", 1.0)]),
        "b": fakes.ListRetriever(docs=[fakes.doc("d", "Shared document text.", 2.0)]),
    }
    fused = build_graph({"retrievers": [], "fusion": {"k": 10}}, retrievers=retrievers).invoke(
        {"query": "shared text"}
    )
    assert fused["documents"][0]["fused_score"] == pytest.approx(2 / 11)


@pytest.mark.parametrize("method", ["minmax", "zscore", "dbsf"])
def test_a_k_beside_a_score_method_is_refused_naming_method_and_k(method):
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"retrievers": [], "fusion": {"method": method, "k": 60}}, extra_retrievers=["a", "b"]
        )
    message = str(caught.value)
    assert "fusion.k:" in message and "fusion.method" in message and repr(method) in message


def test_a_score_methods_settings_dump_without_k_and_load_again():
    dumped = FusionConfig(dense_weight=0.5).model_dump()
    assert dumped == {"method": "minmax", "weights": {}, "dense_weight": 0.5}
    assert FusionConfig.model_validate(dumped) == FusionConfig(dense_weight=0.5)
    assert FusionConfig.model_validate({"method": "rrf", "k": 5}).model_dump()["k"] == 5


# ---------------------------------------------------------------- normalised-score methods


def test_methods_and_shipped_defaults():
    assert FUSION_METHODS == ("rrf", "minmax", "zscore", "dbsf")
    assert DEFAULT_FUSION_METHOD in FUSION_METHODS
    shipped = FusionConfig()
    assert (shipped.method, shipped.k, shipped.weights, shipped.dense_weight) == (
        DEFAULT_FUSION_METHOD,
        DEFAULT_FUSION_K,
        {},
        DEFAULT_DENSE_WEIGHT,
    )
    # chosen on training data (bench/fusion_methods.py)
    assert (DEFAULT_FUSION_METHOD, DEFAULT_DENSE_WEIGHT) == ("minmax", 0.75)
    tuned = FusionConfig(weights={"vec": 2.0, "lex": 0.5}, dense_weight=0.3)
    assert tuned.weights_for(["vec", "other-vec"]) == {"vec": 2.0, "other-vec": 0.3, "lex": 0.5}


def test_a_config_without_fusion_settings_weighs_dense_retrievers_down(fakes):
    def retrievers():
        return {
            "lex": fakes.ListRetriever(
                docs=[fakes.doc("d", "Lexical match.", 3.0), fakes.doc("e", "Other.", 1.0)]
            ),
            "vec": fakes.DenseListRetriever(
                docs=[fakes.doc("e", "Other.", 0.9), fakes.doc("d", "Lexical match.", 0.1)]
            ),
        }

    result = build_graph({"retrievers": []}, retrievers=retrievers()).invoke(
        {"query": "lexical match"}
    )
    scores = {d["id"]: d["fused_score"] for d in result["documents"]}
    assert scores == pytest.approx({"d": 1.0, "e": DEFAULT_DENSE_WEIGHT})
    named = build_graph(
        {"retrievers": [], "fusion": {"weights": {"vec": 2.0}}}, retrievers=retrievers()
    ).invoke({"query": "lexical match"})
    assert [d["id"] for d in named["documents"]] == ["e", "d"]


def test_minmax_arithmetic(br):
    branches = [
        br(0, "lex", 0, [("a", 1, 12.0), ("b", 2, 8.0), ("c", 3, 2.0)]),
        br(0, "dense", 1, [("b", 1, 0.9), ("d", 2, 0.5), ("a", 3, 0.4)]),
    ]
    fused = by_id(score_fusion(branches, method="minmax", weights={"dense": 2.0}))
    assert fused["a"]["fused_score"] == pytest.approx(1.0 + 2.0 * 0.0)
    assert fused["b"]["fused_score"] == pytest.approx(0.6 + 2.0 * 1.0)
    assert fused["c"]["fused_score"] == pytest.approx(0.0)
    assert fused["d"]["fused_score"] == pytest.approx(2.0 * 0.2)
    order = [d["id"] for d in score_fusion(branches, method="minmax", weights={"dense": 2.0})]
    assert order == ["b", "a", "d", "c"]


def test_zscore_is_shifted_so_the_worst_hit_counts_zero(br):
    scores = [9.0, 6.0, 3.0]  # mean 6, sample std 3
    (branch,) = [br(0, "lex", 0, [("a", 1, 9.0), ("b", 2, 6.0), ("c", 3, 3.0)])]
    fused = by_id(score_fusion([branch], method="zscore"))
    assert [fused[i]["fused_score"] for i in "abc"] == pytest.approx([2.0, 1.0, 0.0])
    assert normalise(scores, "zscore") == pytest.approx([2.0, 1.0, 0.0])


def test_dbsf_maps_mean_plus_minus_three_std_to_zero_and_one_like_qdrant(br):
    scores = [9.0, 6.0, 3.0]  # mean 6, sample std 3: [-3, 15] -> [0, 1], no clipping
    assert normalise(scores, "dbsf") == pytest.approx([12 / 18, 9 / 18, 6 / 18])
    branches = [
        br(0, "lex", 0, [("a", 1, 9.0), ("b", 2, 6.0), ("c", 3, 3.0)]),
        br(0, "dense", 1, [("c", 1, 0.8), ("b", 2, 0.6)]),  # sample std 0.1414
    ]
    fused = by_id(score_fusion(branches, method="dbsf"))
    std = 0.02**0.5  # sample std of 0.8, 0.6
    low = 0.7 - 3 * std
    assert fused["c"]["fused_score"] == pytest.approx(6 / 18 + (0.8 - low) / (6 * std))
    assert fused["b"]["fused_score"] == pytest.approx(9 / 18 + (0.6 - low) / (6 * std))


@pytest.mark.parametrize("method", SCORE_METHODS)
def test_a_branch_whose_scores_do_not_spread_counts_each_hit_as_its_best(br, method):
    assert FLAT_SCORE == 1.0
    assert normalise([3.0], method) == [FLAT_SCORE]
    assert normalise([2.0, 2.0, None], method) == [FLAT_SCORE, FLAT_SCORE, 0.0]
    (doc,) = score_fusion([br(0, "lex", 0, [("a", 1, 7.0)])], method=method)
    assert doc["fused_score"] == FLAT_SCORE


@pytest.mark.parametrize("method", SCORE_METHODS)
def test_branch_without_scores_fuses_on_reciprocal_rank_pseudo_scores(br, method):
    scoreless = br(0, "foreign", 0, [("a", 1), ("b", 2), ("c", 3)])
    assert branch_scores(scoreless["hits"], k=10) == pytest.approx([1 / 11, 1 / 12, 1 / 13])
    fused = score_fusion([scoreless], method=method, k=10)
    assert [d["id"] for d in fused] == ["a", "b", "c"]
    expected = normalise([1 / 11, 1 / 12, 1 / 13], method)
    assert [d["fused_score"] for d in fused] == pytest.approx(expected)
    assert [s["score"] for d in fused for s in d["sources"]] == [None, None, None]


@pytest.mark.parametrize(
    "scores",
    [
        [0.1, 0.5, 0.9],  # a distance: ascends with rank
        [3.0, None, 1.0],  # a hole in the middle
        [3.0, float("nan"), 1.0],
        [float("inf"), 2.0, 1.0],
    ],
)
def test_unusable_scores_fall_back_to_ranks(br, scores):
    hits = [(doc, rank, score) for doc, rank, score in zip("abc", [1, 2, 3], scores, strict=True)]
    branch = br(0, "x", 0, hits)
    assert branch_scores(branch["hits"], k=60) == pytest.approx([1 / 61, 1 / 62, 1 / 63])
    assert [d["id"] for d in score_fusion([branch], method="minmax")] == ["a", "b", "c"]


def test_reranked_branch_is_normalised_on_rerank_scores_and_its_unscored_tail_counts_zero(br):
    branch = br(0, "lex", 0, [("a", 1, 1.0), ("b", 2, 9.0), ("c", 3, 5.0)])
    branch["hits"][0]["rerank_score"] = 0.9
    branch["hits"][1]["rerank_score"] = 0.1  # c: beyond the rerank budget, unscored
    assert branch_scores(branch["hits"]) == [0.9, 0.1, None]
    fused = by_id(score_fusion([branch], method="minmax"))
    assert [fused[i]["fused_score"] for i in "abc"] == pytest.approx([1.0, 0.0, 0.0])
    assert [d["id"] for d in score_fusion([branch], method="minmax")] == ["a", "b", "c"]


@pytest.mark.parametrize("method", FUSION_METHODS)
def test_duplicates_sources_and_arrival_order_are_the_same_for_every_method(br, method):
    branches = [
        br(0, "lex", 0, [("x", 2, 3.0), ("only-lex", 1, 5.0)]),
        br(0, "dense", 1, [("x", 1, 0.8), ("y", 2, 0.2)]),
        br(1, "lex", 0, [("x", 1, 4.0), ("z", 2, 1.0)], view_kind="rewrite"),
        br(1, "dense", 1, [("x", 3, 0.1)], view_kind="rewrite"),
    ]
    expected = fuse_branches(branches, method=method)
    rng = random.Random(99)
    for _ in range(5):
        shuffled = list(branches)
        rng.shuffle(shuffled)
        assert fuse_branches(shuffled, method=method) == expected
    x = by_id(expected)["x"]
    assert x["content"] == branches[0]["hits"][0]["content"]
    assert [(s["view"], s["retriever"], s["rank"]) for s in x["sources"]] == [
        ("view 0", "lex", 2),
        ("view 0", "dense", 1),
        ("view 1", "lex", 1),
        ("view 1", "dense", 3),
    ]
    assert [d["fused_rank"] for d in expected] == list(range(1, len(expected) + 1))
    assert expected[0]["id"] == "x"  # found by every branch


@pytest.mark.parametrize("method", FUSION_METHODS)
def test_ties_go_to_best_rank_then_first_appearance_for_every_method(br, method):
    # two single-hit branches: each hit normalises to the same value (0.5, or 1/(k+1) in RRF)
    in_order = [br(0, "lex", 0, [("lex-doc", 1, 3.0)]), br(0, "dense", 1, [("dense-doc", 1, 0.3)])]
    arrived = list(reversed(in_order))
    assert [d["id"] for d in fuse_branches(arrived, method=method)] == ["lex-doc", "dense-doc"]


@pytest.mark.parametrize("method", FUSION_METHODS)
def test_zero_weight_keeps_the_source_and_failed_branches_add_nothing(br, method):
    failed = br(0, "dense", 1, [])
    failed.update(status="failed", error="RuntimeError: down")
    branches = [
        br(0, "lex", 0, [("a", 1, 2.0), ("b", 2, 1.0)]),
        failed,
        br(0, "w0", 2, [("b", 1, 5.0)]),
    ]
    fused = fuse_branches(branches, method=method, weights={"w0": 0.0}, top_k=1)
    assert [d["id"] for d in fused] == ["a"]
    b = by_id(fuse_branches(branches, method=method, weights={"w0": 0.0}))["b"]
    assert [s["retriever"] for s in b["sources"]] == ["lex", "w0"]


@pytest.mark.parametrize("method", FUSION_METHODS)
@pytest.mark.parametrize("k", [0, -5])
def test_k_must_be_positive_for_every_method(br, method, k):
    with pytest.raises(ValueError, match="k"):
        fuse_branches([br(0, "lex", 0, [("a", 1, 1.0)])], method=method, k=k)


def test_unknown_method_and_rrf_as_a_score_method_are_refused(br):
    with pytest.raises(ValueError, match="unknown fusion method 'borda'"):
        fuse_branches([br(0, "lex", 0, [("a", 1)])], method="borda")
    with pytest.raises(ValueError, match="rrf"):
        score_fusion([br(0, "lex", 0, [("a", 1)])], method="rrf")


def test_rrf_through_fuse_branches_is_reciprocal_rank_fusion(br):
    branches = [br(0, "lex", 0, [("a", 1, 3.0), ("b", 2, 1.0)]), br(0, "dense", 1, [("b", 1, 0.5)])]
    assert fuse_branches(branches, method="rrf", k=7) == reciprocal_rank_fusion(branches, k=7)


def test_config_method_is_validated_and_named_in_the_error():
    base = {"retrievers": [{"name": "a", "backend": "bm25"}, {"name": "b", "backend": "bm25"}]}
    assert parse_config({**base, "fusion": {"method": "dbsf"}}).fusion.method == "dbsf"
    with pytest.raises(ConfigError, match="fusion.method"):
        parse_config({**base, "fusion": {"method": "borda"}})


def test_config_method_and_the_per_run_knob_select_the_fusion(fakes):
    def retrievers():
        return {
            "a": fakes.ListRetriever(
                docs=[fakes.doc("d", "Shared text.", 4.0), fakes.doc("e", "Other text.", 2.0)]
            ),
            "b": fakes.ListRetriever(docs=[fakes.doc("e", "Other text.", 0.9)]),
        }

    minmax = build_graph(
        {"retrievers": [], "fusion": {"method": "minmax", "weights": {"b": 3.0}}},
        retrievers=retrievers(),
    )
    result = minmax.invoke({"query": "shared text"})
    scores = {d["id"]: d["fused_score"] for d in result["documents"]}
    assert scores == pytest.approx({"d": 1.0, "e": 0.0 + 3.0 * FLAT_SCORE})
    rrf = minmax.invoke({"query": "shared text"}, context={"fusion_method": "rrf", "fusion_k": 1})
    scores = {d["id"]: d["fused_score"] for d in rrf["documents"]}
    assert scores == pytest.approx({"d": 1 / 2, "e": 1 / 3 + 3.0 / 2})
    via_configurable = minmax.invoke(
        {"query": "shared text"}, config={"configurable": {"fusion_method": "rrf", "fusion_k": 1}}
    )
    assert via_configurable["documents"] == rrf["documents"]
