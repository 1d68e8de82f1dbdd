"""Route preview (studio/router/preview.py): the plan a route would run, read from its compiled
pipeline, without retrieving."""

from __future__ import annotations

import json

from parallel_rag.studio.router.configuration import parse_router
from parallel_rag.studio.router.preview import retrieval_plan
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
