"""vLLM Semantic Router's ``providers`` section (``studio/router/semantic_router_providers.py``):
each model's ``backend_refs`` become the upstream of the decisions that name it,
``default_model`` becomes a route, and what cannot map is listed. The whole upstream
``config/config.yaml`` (tests/support/semantic_router/config-whole.yaml) loads through the
product's loader with no edits."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from parallel_rag.studio.router.configuration import RouteError, load_router, parse_router

WHOLE_CONFIG = (
    Path(__file__).resolve().parents[1] / "support" / "semantic_router" / "config-whole.yaml"
)


def model(name: str = "m", **fields) -> dict:
    return {"name": name, **fields}


def ref(endpoint: str = "10.0.0.1:8000", **fields) -> dict:
    return {"endpoint": endpoint, "protocol": "http", **fields}


def router(*models: dict, decisions: list[dict] | None = None, **top) -> dict:
    return {
        "providers": {"models": list(models)},
        "routing": {"decisions": decisions or [{"name": "r", "modelRefs": [{"model": "m"}]}]},
        **top,
    }


def loaded(data: dict):
    config = parse_router(copy.deepcopy(data), base_dir=Path("/srv/router"))
    return config, "\n".join(config.warnings)


def upstream_of(config, name: str = "r"):
    return config.upstream_for(config.decisions[name])


def test_the_whole_upstream_file_loads_with_upstreams_from_backend_refs():
    config, pipeline, _ = load_router(WHOLE_CONFIG)
    assert pipeline is None
    decisions = config.decisions
    assert len(decisions) == 24  # upstream's 23 decisions and its default model's route
    for decision in decisions.values():  # every decision forwards to a backend_ref
        assert upstream_of(config, decision.name).base_url.startswith("http://127.0.0.1:800")
    business = upstream_of(config, "static_business_route")  # qwen3-8b: local-primary
    assert (business.base_url, business.api_key_env) == (
        "http://127.0.0.1:8000/v1",
        "VLLM_SR_PRIMARY_API_KEY",
    )
    assert upstream_of(config, "admin_adaptive_route").base_url == "http://127.0.0.1:8001/v1"
    assert decisions["admin_adaptive_route"].model == "qwen3-32b"
    assert upstream_of(config, "image_generation_route").base_url == "http://127.0.0.1:8003/v1"
    assert config.routing.default == "qwen3-8b" and decisions["qwen3-8b"].model == "qwen3-8b"
    assert decisions["long_context_latency_route"].rag is None  # its MCP server is undeclared
    assert decisions["spanish_adaptive_route"].rag is not None
    text = "\n".join(config.warnings)
    for listed in [
        "not used: 'remote-secondary' (weight 20)",
        "providers.models.1 (qwen3-32b).api_format: 'anthropic'",
        "providers.models.0 (qwen3-8b): ignored: pricing, reasoning_family, reliability",
        "providers.defaults: ignored: default_reasoning_effort, reasoning_families",
        "no MCP server 'docs-server' under mcp_servers",
        "a plain route 'qwen3-8b' is added and is routing.default",
        "listeners: vLLM Semantic Router setting, ignored",
        "global.integrations:",
        "routing.modelCards:",
        "'image_gen' is not supported",
        "modality DIFFUSION",
    ]:
        assert listed in text, listed
    assert len(config.warnings) == len(set(config.warnings))


def test_the_heaviest_ref_is_used_and_the_others_are_listed():
    light, heavy, twin = (
        ref("10.0.0.1:1", name="a", weight=1),
        ref("10.0.0.2:2", weight=5),
        ref("10.0.0.3:3", name="c", weight=5),
    )
    config, text = loaded(router(model(backend_refs=[light, heavy, twin])))
    assert upstream_of(config).base_url == "http://10.0.0.2:2/v1"  # a tie keeps the first
    assert "every request goes to 'backend_refs.1' (weight 5)" in text
    assert "not used: 'a' (weight 1), 'c' (weight 5)" in text


def test_a_missing_weight_counts_as_one_as_upstream_counts_it():
    config, _ = loaded(router(model(backend_refs=[ref("h1:1"), ref("h2:2", weight=2)])))
    assert upstream_of(config).base_url == "http://h2:2/v1"


@pytest.mark.parametrize(
    ("fields", "sent"),
    [
        ({"external_model_ids": {"vllm": "org/M-7B"}}, "org/M-7B"),  # the ref's default type
        ({"external_model_ids": {"openai": "x"}, "provider_model_id": "p"}, "m"),
        ({"provider_model_id": "m-instruct"}, "m-instruct"),
        ({}, "m"),
    ],
)
def test_the_model_name_sent_is_upstreams_external_id_for_the_ref_type(fields, sent):
    config, _ = loaded(router(model(backend_refs=[ref()], **fields)))
    assert config.decisions["r"].model == sent


def test_a_base_url_ref_with_its_key_and_what_it_cannot_send():
    remote = {
        "base_url": "https://api.example.com/v1/",
        "provider": "anthropic",
        "api_key": "k-1",
        "auth_header": "x-api-key",
        "auth_prefix": "",
        "chat_path": "/messages",
        "extra_headers": {"X-Tenant": "t"},
        "api_version": "2025-03-01",
    }
    config, text = loaded(router(model(backend_refs=[remote])))
    upstream = upstream_of(config)
    assert upstream.base_url == "https://api.example.com/v1"
    assert upstream.resolved_api_key() == "k-1"
    assert "not in x-api-key" in text
    assert "'/messages': requests go to <base_url>/chat/completions" in text
    assert "ignored: api_version, extra_headers" in text
    assert ".provider: 'anthropic'" in text


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("https://gpu-1:8443/ignored/path", "https://gpu-1:8443/v1"),
        ("gpu-1", "http://gpu-1/v1"),
    ],
)
def test_an_endpoint_ref_becomes_a_v1_url(endpoint, url):
    config, _ = loaded(router(model(backend_refs=[{"endpoint": endpoint}])))
    assert upstream_of(config).base_url == url


def test_our_top_level_upstream_wins_over_backend_refs_and_says_so():
    data = router(model(backend_refs=[ref()]), upstream={"base_url": "http://ours:1/v1"})
    config, text = loaded(data)
    assert upstream_of(config).base_url == "http://ours:1/v1"
    assert config.decisions["r"].upstream is None
    assert "backend_refs of ['m'] not used: the top-level upstream serves" in text


def test_a_model_without_usable_refs_and_no_upstream_is_refused_naming_the_decision():
    with pytest.raises(RouteError) as caught:
        parse_router(router(model(backend_refs=[{"name": "nowhere"}])))
    assert "routing.decisions.0.upstream: no upstream here" in str(caught.value)


def test_default_model_is_a_route_beside_a_default_the_file_names():
    data = router(model(backend_refs=[ref()]))
    data["providers"]["defaults"] = {"default_model": "m"}
    data["routing"]["default"] = "r"
    config, text = loaded(data)
    assert config.routing.default == "r"
    assert upstream_of(config, "m").base_url == "http://10.0.0.1:8000/v1"
    assert "a plain route 'm' is added (routing.default stays as written)" in text


def test_default_model_named_like_a_decision_adds_no_route():
    data = router(
        model(backend_refs=[ref()]), decisions=[{"name": "m", "modelRefs": [{"model": "m"}]}]
    )
    data["providers"]["defaults"] = {"default_model": "m"}
    config, text = loaded(data)
    assert list(config.decisions) == ["m"] and config.routing.default is None
    assert "'m' is also a decision's name; no route added" in text


def mcp_route(on_failure: str) -> dict:
    rag = {
        "enabled": True,
        "backend": "mcp",
        "on_failure": on_failure,
        "backend_config": {"server_name": "docs-server", "tool_name": "search"},
    }
    decision = {
        "name": "r",
        "modelRefs": [{"model": "m"}],
        "plugins": [{"type": "rag", "configuration": rag}],
    }
    return router(model(backend_refs=[ref()]), decisions=[decision])


def test_an_undeclared_mcp_server_on_a_skip_route_turns_its_retrieval_off_and_says_how():
    config, text = loaded(mcp_route("skip"))
    assert config.decisions["r"].rag is None and config.pipeline_for("r") is None
    assert "mcp_servers: {docs-server: {transport: streamable_http" in text


@pytest.mark.parametrize("policy", ["block", "warn"])
def test_an_undeclared_mcp_server_on_another_policy_is_still_refused(policy):
    with pytest.raises(RouteError) as caught:
        parse_router(mcp_route(policy))
    assert "no MCP server 'docs-server' under mcp_servers" in str(caught.value)


def test_a_declared_mcp_server_keeps_the_skip_route_retrieving():
    data = mcp_route("skip")
    data["mcp_servers"] = {"docs-server": {"transport": "streamable_http", "url": "http://h:9/mcp"}}
    config, text = loaded(data)
    assert config.pipeline_for("r") is not None
    assert "no MCP server" not in text
