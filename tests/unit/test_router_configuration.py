"""The router's configuration (studio/router/configuration.py, plugin.py, bindings.py): the rag
plugin blocks as the plugin prints them, the reranker binding, per-decision upstreams, errors
naming the field. Offline and fast: no store is opened, no model loaded."""

from __future__ import annotations

import copy

import pytest
from parallel_rag.studio.router.configuration import parse_router, split_router_data
from parallel_rag.studio.router.errors import RouteError
from parallel_rag.studio.router.plugin import RoutePipelineConfig
from parallel_rag.studio.router.preview import retrieval_plan
from router_recipes import recipe


def refused(data: dict) -> str:
    with pytest.raises(RouteError) as caught:
        parse_router(data)
    return str(caught.value)


def test_seed_blocks_paste_in_unchanged():
    config = parse_router(recipe())
    for name, backend in (("milvus-docs", "milvus"), ("qdrant-docs", "qdrant")):
        pipeline = config.pipeline_for(name)
        assert isinstance(pipeline, RoutePipelineConfig)
        (entry,) = pipeline.retrievers
        assert entry.backend == backend and entry.top_k == 5
        assert entry.similarity_threshold == 0.78
        assert entry.backend_config.collection == "docs"
        assert pipeline.on_failure == "warn"
        assert config.decisions[name].rag.injection_mode == "tool_role"


def test_reranker_binding_drives_the_cross_encoder():
    config = parse_router(recipe())
    reranker = config.pipeline_for("ranked").reranker
    assert reranker.kind == "cross_encoder"
    assert reranker.model == "vllm-sr/Vela-1.0-Encoder-307M-Reranker"
    assert (reranker.layer, reranker.dimension) == (22, 768)
    assert (reranker.max_tokens, reranker.overflow) == (4096, "reject")
    assert reranker.top_k == 3
    assert reranker.on_failure == "block"  # the plugin's on_failure governs rerank too
    assert config.decisions["ranked"].rag.injected_top_k() == 3


def test_nested_rag_reranker_binding_is_accepted():
    data = recipe()
    bindings = data["routing"]["model_bindings"]
    bindings["rag"] = {"reranker": bindings.pop("rag.reranker")}
    assert parse_router(data).pipeline_for("ranked").reranker.layer == 22


def test_rerank_without_binding_is_refused():
    data = recipe()
    del data["routing"]["model_bindings"]
    message = refused(data)
    assert "routing.decisions.2.plugins.0.configuration.rerank" in message


def test_wrong_contract_is_refused():
    data = recipe()
    data["routing"]["model_bindings"]["rag.reranker"]["contract"] = "scores.v2"
    assert "routing.model_bindings.rag.reranker.contract" in refused(data)


def test_parallel_pipeline_route():
    config = parse_router(recipe())
    pipeline = config.pipeline_for("parallel")
    assert [e.name for e in pipeline.retrievers] == ["lexical", "dense"]
    assert pipeline.fusion.k == 30
    rag = config.decisions["parallel"].rag
    assert rag.injected_top_k() == 4 and rag.injection_mode == "system_prompt"


def test_routes_without_enabled_rag_retrieve_nothing():
    config = parse_router(recipe())
    for name in ("chat", "disabled"):
        assert config.decisions[name].rag is None
        assert config.pipeline_for(name) is None
        assert retrieval_plan(config.decisions[name], None) == {"retrieval": False}


def test_upstream_override_per_decision(monkeypatch):
    monkeypatch.setenv("ROUTE_KEY", "sk-route")
    config = parse_router(recipe())
    upstream = config.upstream_for(config.decisions["parallel"])
    assert upstream.base_url == "http://127.0.0.1:9000/v1"
    assert upstream.resolved_api_key() == "sk-route"
    assert upstream.timeout_settings.read == 5
    assert config.upstream_for(config.decisions["chat"]).base_url.endswith(":8080/v1")


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            lambda d: d["routing"]["decisions"][1]["plugins"][0]["configuration"].update(top_k="x"),
            "routing.decisions.1.plugins.0.configuration.top_k",
        ),
        (
            lambda d: d["routing"]["decisions"][1]["plugins"][0]["configuration"][
                "backend_config"
            ].update(colection="docs"),
            "routing.decisions.1.plugins.0.configuration.backend_config.colection",
        ),
        (
            lambda d: d["routing"]["decisions"][1]["plugins"][0]["configuration"].update(
                injection_mode="header"
            ),
            "routing.decisions.1.plugins.0.configuration.injection_mode",
        ),
        (
            lambda d: d["routing"]["decisions"][0]["plugins"][0]["configuration"].update(
                backend="mcp"
            ),
            "routing.decisions.0.plugins.0.configuration",
        ),
        (lambda d: d["routing"].update(default="nowhere"), "routing.default"),
        (lambda d: d["routing"]["decisions"][3].update(name="auto"), "routing.decisions.3.name"),
        (
            lambda d: d["routing"]["decisions"][3]["plugins"][0]["configuration"][
                "retrievers"
            ].extend([{"name": f"x{i}", "backend": "bm25"} for i in range(3)]),
            "routing.decisions.3.plugins.0.configuration",
        ),
        (
            lambda d: d["routing"]["decisions"][4].update(plugins=[{"type": "semantic-cache"}]),
            "routing.decisions.4.plugins.0.type",
        ),
        (lambda d: d.pop("upstream"), "routing.decisions.0.upstream"),
        (lambda d: d["upstream"].update(base_url="ftp://x"), "upstream.base_url"),
    ],
)
def test_errors_name_the_field(change, path):
    data = recipe()
    change(data)
    assert path in refused(data)


def test_duplicate_decision_names_refused():
    data = recipe()
    data["routing"]["decisions"].append(copy.deepcopy(data["routing"]["decisions"][0]))
    assert "duplicate decision name" in refused(data)


def test_top_level_pipeline_is_split_off():
    data = recipe()
    data["retrievers"] = [{"backend": "bm25"}, {"backend": "qdrant"}]
    router, pipeline = split_router_data(data)
    assert set(router) == {"routing", "upstream", "global"}
    assert list(pipeline) == ["retrievers"]
