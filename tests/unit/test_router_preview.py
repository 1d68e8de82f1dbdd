"""Route preview (studio/router/preview.py): the plan a route would run, read from its compiled
pipeline, without retrieving."""

from __future__ import annotations

import json

import pytest
from parallel_rag.graph.builder import build_graphs
from parallel_rag.graph.fitted_fusion import NOT_FITTED
from parallel_rag.studio.router.configuration import parse_router
from parallel_rag.studio.router.preview import fusion_plan, retrieval_plan
from parallel_rag.studio.router.runtime import RouterRuntime
from router_recipes import recipe


def runtime(tmp_path) -> RouterRuntime:
    return RouterRuntime(parse_router(recipe()), tmp_path, compile_graphs=False)


def test_single_backend_route_is_a_one_branch_pipeline():
    plan = retrieval_plan(
        parse_router(recipe()).decisions["qdrant-docs"],
        parse_router(recipe()).pipeline_for("qdrant-docs"),
    )
    assert plan["form"] == "single_backend"
    assert [b["retriever"] for b in plan["branches"]] == ["qdrant"]
    assert plan["documents_injected"] == 5
    assert plan["rerank"] is None


def test_preview_plan_without_retrieval(tmp_path):
    preview = runtime(tmp_path).preview(
        {"model": "ranked", "messages": [{"role": "user", "content": "q"}], "rag": {"top_k": 2}}
    )
    assert preview["route"] == "ranked" and preview["reason"] == "model"
    plan = preview["plan"]
    assert plan["rerank"]["kind"] == "cross_encoder" and plan["rerank"]["top_k"] == 3
    assert plan["documents_injected"] == 2
    assert plan["on_failure"] == "block"
    assert "latency" not in json.dumps(preview) and "ms" not in plan


def route_with_fusion(fusion: dict):
    data = recipe()
    parallel = next(d for d in data["routing"]["decisions"] if d["name"] == "parallel")
    parallel["plugins"][0]["configuration"]["fusion"] = fusion
    return parse_router(data).pipeline_for("parallel")


@pytest.mark.parametrize(
    ("fusion", "expected"),
    [
        (  # the shipped defaults: min-max, dense retrievers weighed by dense_weight
            {},
            {"method": "minmax", "dense_weight": 0.75, "weights": {"lexical": 1.0, "dense": 0.75}},
        ),
        (  # a bare k is how a config asks for RRF
            {"k": 30},
            {
                "method": "rrf",
                "k": 30,
                "dense_weight": 0.75,
                "weights": {"lexical": 1.0, "dense": 0.75},
            },
        ),
        (
            {"method": "zscore", "dense_weight": 0.5, "weights": {"lexical": 2.0}},
            {"method": "zscore", "dense_weight": 0.5, "weights": {"lexical": 2.0, "dense": 0.5}},
        ),
        (
            {"method": "rrf", "k": 5, "dense_weight": 1.0},
            {
                "method": "rrf",
                "k": 5,
                "dense_weight": 1.0,
                "weights": {"lexical": 1.0, "dense": 1.0},
            },
        ),
    ],
)
def test_preview_reports_the_fusion_the_route_runs(tmp_path, fusion, expected):
    pipeline = route_with_fusion(fusion)
    assert fusion_plan(pipeline) == expected
    # the weights the compiled graph's fuse node is given (its dense retrievers, as built)
    scope = build_graphs(pipeline, base_dir=tmp_path).knob_scope
    fused = pipeline.fusion.weights_for(sorted(scope.dense))
    assert expected["weights"] == {n: fused.get(n, 1.0) for n in ("lexical", "dense")}


def test_preview_of_a_single_backend_route_reports_its_fusion(tmp_path):
    preview = runtime(tmp_path).preview(
        {"model": "qdrant-docs", "messages": [{"role": "user", "content": "q"}]}
    )
    assert preview["plan"]["fusion"] == {
        "method": "minmax",
        "dense_weight": 0.75,
        "weights": {"qdrant": 0.75},
        "source": "default",  # nothing ingested: no fit (graph/fitted_fusion.py)
        "note": NOT_FITTED,
    }


def test_preview_shows_what_a_conversation_would_retrieve_on(tmp_path):
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Which bridge carries the A75 autoroute in France?"},
        {"role": "assistant", "content": "The Millau Viaduct."},
        {"role": "user", "content": "Who designed it?"},
    ]
    preview = runtime(tmp_path).preview({"model": "parallel", "messages": conversation})
    resolution = preview["resolution"]
    assert resolution["question"] == "Who designed it?"
    assert "Millau Viaduct" in resolution["retrieved_on"]  # "Who designed the Millau Viaduct?"
    assert resolution["method"] == "carry_over" and "Millau Viaduct" in resolution["subject"]
    first = runtime(tmp_path).preview(
        {"model": "parallel", "messages": [{"role": "user", "content": "What is BM25?"}]}
    )
    assert first["resolution"]["retrieved_on"] == "What is BM25?"
    assert first["resolution"]["method"] == "as_written"
    chat = runtime(tmp_path).preview({"model": "chat", "messages": conversation})
    assert chat["resolution"] is None  # a route that does not retrieve retrieves on nothing
