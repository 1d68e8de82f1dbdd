"""vLLM Semantic Router configurations: every upstream-shaped rag block and decision loads
mapped onto ours (or is refused naming the field and what to write instead), and whatever
cannot map is listed as a start-up warning. The real upstream configuration is
tests/support/semantic_router/config.yaml (docs/migrating-from-semantic-router.md)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from parallel_rag.studio.router.configuration import RouteError, load_router, parse_router

UPSTREAM_CONFIG = (
    Path(__file__).resolve().parents[1] / "support" / "semantic_router" / "config.yaml"
)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
UPSTREAM = {"base_url": "http://127.0.0.1:8080/v1"}
DOCS_SERVER = {"docs-server": {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp"}}


BY_PRIORITY = [  # upstream's decisions in the fixture, highest priority first
    "support_router_dc_route",
    "urgent_automix_route",
    "spanish_adaptive_route",
    "admin_adaptive_route",
    "long_context_latency_route",
    "fallback_knn_route",
    "clarification_kmeans_route",
    "safe_only_svm_route",
    "mlp_experimental_route",
]


def upstream_data() -> dict:
    data = yaml.safe_load(UPSTREAM_CONFIG.read_text(encoding="utf-8"))
    data["upstream"] = dict(UPSTREAM)
    data["mcp_servers"] = copy.deepcopy(DOCS_SERVER)
    return data


def one_route(configuration: dict, **decision) -> dict:
    return {
        "upstream": dict(UPSTREAM),
        "mcp_servers": copy.deepcopy(DOCS_SERVER),
        "routing": {
            "decisions": [
                {
                    "name": "r",
                    "model": "m",
                    **decision,
                    "plugins": [{"type": "rag", "configuration": configuration}],
                }
            ]
        },
    }


def loaded(data: dict):
    config = parse_router(data, base_dir=Path("/srv/router"))
    return config, config.warnings


def refusal(data: dict) -> str:
    with pytest.raises(RouteError) as caught:
        parse_router(data)
    return str(caught.value)


def leaf(config, name: str = "r"):
    return config.pipeline_for(name).retrievers[0]


# -- the rag plugin's upstream field names ------------------------------------------------


def test_cache_fields_map_onto_the_route_cache():
    config, warnings = loaded(
        one_route(
            {
                "backend": "vectorstore",
                "backend_config": {"vector_store_id": "local-vs", "file_ids": ["kb-001"]},
                "cache_results": True,
                "cache_ttl_seconds": 600,
            }
        )
    )
    rag = config.decisions["r"].rag
    assert (rag.cache_results, rag.cache_ttl_seconds) == (True, 600)
    assert warnings == []


def test_min_confidence_threshold_is_reported_as_ignored():
    _, warnings = loaded(
        one_route(
            {
                "backend": "vectorstore",
                "backend_config": {"vector_store_id": "vs"},
                "min_confidence_threshold": 0.55,
            }
        )
    )
    assert len(warnings) == 1
    assert "min_confidence_threshold" in warnings[0] and "always retrieves" in warnings[0]


def test_empty_injection_mode_and_on_failure_mean_the_default():
    config, _ = loaded(
        one_route(
            {
                "backend": "vectorstore",
                "backend_config": {"vector_store_id": "vs"},
                "injection_mode": "",
                "on_failure": "",
            }
        )
    )
    rag = config.decisions["r"].rag
    assert (rag.injection_mode, rag.on_failure) == ("tool_role", "warn")


def test_hybrid_primary_name_with_primary_config_becomes_our_legs():
    config, _ = loaded(
        one_route(
            {
                "backend": "hybrid",
                "top_k": 6,
                "backend_config": {
                    "primary": "vectorstore",
                    "fallback": "external_api",
                    "strategy": "parallel",
                    "primary_config": {"vector_store_id": "vs"},
                    "fallback_config": {
                        "endpoint": "https://search.example.com/query",
                        "request_format": "pinecone",
                    },
                },
            }
        )
    )
    settings = leaf(config).backend_config
    assert settings.primary.backend == "vectorstore"
    assert settings.fallback.backend == "external_api"
    assert settings.fallback.backend_config.request_format == "pinecone"
    assert settings.strategy == "parallel"


def test_mcp_tool_arguments_are_our_arguments():
    config, _ = loaded(
        one_route(
            {
                "backend": "mcp",
                "backend_config": {
                    "server_name": "docs-server",
                    "tool_name": "retrieve_docs",
                    "tool_arguments": {"query": "${user_content}", "top_k": "${top_k}"},
                    "timeout_seconds": 20,
                },
            }
        )
    )
    assert leaf(config).backend_config.arguments == {
        "query": "${user_content}",
        "top_k": "${top_k}",
    }


def test_openai_workflow_mode_and_file_ids_are_reported_and_a_flat_filter_is_translated():
    config, warnings = loaded(
        one_route(
            {
                "backend": "openai",
                "backend_config": {
                    "vector_store_id": "vs_docs_prod",
                    "base_url": "https://api.openai.com",
                    "api_key": "openai-file-search-key",
                    "file_ids": ["file_a", "file_b"],
                    "filter": {"doc_type": "manual"},
                    "workflow_mode": "tool_based",
                },
            }
        )
    )
    settings = leaf(config).backend_config
    assert settings.base_url == "https://api.openai.com/v1"
    assert settings.filter == {"type": "eq", "key": "doc_type", "value": "manual"}
    assert any("workflow_mode" in w and "direct_search" in w for w in warnings)
    assert any("file_ids" in w and "ignored" in w for w in warnings)


def test_openai_direct_search_workflow_mode_loads_silently():
    _, warnings = loaded(
        one_route(
            {
                "backend": "openai",
                "backend_config": {
                    "vector_store_id": "vs",
                    "api_key": "k",
                    "workflow_mode": "direct_search",
                },
            }
        )
    )
    assert warnings == []


@pytest.mark.parametrize(
    "template",
    [
        '{"query":"{{.Query}}","top_k":{{.TopK}},"threshold":{{.Threshold}}}',
        '{"query":"${user_content}","top_k":${top_k},"threshold":${threshold}}',
    ],
)
def test_custom_template_placeholders_are_rewritten_to_ours(template):
    config, _ = loaded(
        one_route(
            {
                "backend": "external_api",
                "backend_config": {
                    "endpoint": "https://search.example.com/query",
                    "request_format": "custom",
                    "request_template": template,
                },
            }
        )
    )
    assert leaf(config).backend_config.request_template == (
        '{"query":"{{query}}","top_k":{{top_k}},"threshold":{{threshold}}}'
    )


def test_weaviate_without_class_name_searches_document_as_upstream_does():
    config, _ = loaded(
        one_route(
            {
                "backend": "external_api",
                "backend_config": {
                    "endpoint": "http://weaviate:8080/v1/graphql",
                    "request_format": "weaviate",
                },
            }
        )
    )
    assert leaf(config).backend_config.class_name == "Document"


@pytest.mark.parametrize(
    ("backend", "opened", "line"),
    [
        ("milvus", "/srv/router/.parallel-rag/milvus.db", "uri: http://MILVUS_HOST:19530"),
        ("qdrant", "/srv/router/.parallel-rag/qdrant", "url: http://QDRANT_HOST:6333"),
    ],
)
def test_store_block_without_connection_warns_with_the_path_and_the_line_to_add(
    backend, opened, line
):
    _, warnings = loaded(
        one_route(
            {
                "backend": backend,
                "backend_config": {
                    "collection": "docs",
                    "reuse_cache_connection": True,
                    "content_field": "content",
                },
            }
        )
    )
    assert len(warnings) == 2
    reuse, local = warnings
    assert "reuse_cache_connection" in reuse and "ignored" in reuse
    assert opened in local and line in local


def test_store_block_with_connection_settings_only_reports_reuse_cache_connection():
    _, warnings = loaded(
        one_route(
            {
                "backend": "qdrant",
                "backend_config": {
                    "collection": "docs",
                    "url": "http://qdrant:6333",
                    "reuse_cache_connection": True,
                },
            }
        )
    )
    assert len(warnings) == 1 and "reuse_cache_connection" in warnings[0]


# -- refusals name the field and what to write --------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d.update(modelRefs=[{"model": "qwen3-8b"}]),
            "routing.decisions.0.modelRefs: give model or modelRefs, not both (write model: NAME)",
        ),
        (
            lambda d: d.pop("model") and d.update(modelRefs=[]),
            "routing.decisions.0.modelRefs: must list at least one {model: NAME}",
        ),
        (
            lambda d: d.update(rules={"type": "keyword", "name": "nowhere"}),
            "keyword signal 'nowhere' is not under routing.signals",
        ),
        (
            lambda d: d["plugins"][0]["configuration"]["backend_config"].update(
                arguments={"query": "${user_content}"}
            ),
            "tool_arguments: give tool_arguments or arguments, not both",
        ),
    ],
)
def test_unmappable_upstream_fields_are_refused_with_the_fix(change, expected):
    data = one_route(
        {
            "backend": "mcp",
            "backend_config": {
                "server_name": "docs-server",
                "tool_name": "retrieve_docs",
                "tool_arguments": {"query": "${user_content}"},
            },
        }
    )
    change(data["routing"]["decisions"][0])
    assert expected in refusal(data)


def test_hybrid_leg_config_without_a_leg_name_is_refused_with_the_fix():
    message = refusal(
        one_route(
            {
                "backend": "hybrid",
                "backend_config": {"primary_config": {"vector_store_id": "vs"}},
            }
        )
    )
    assert "backend_config.primary_config: goes with primary: <backend name>" in message


def test_mcp_placeholders_upstream_has_and_we_do_not_are_refused_naming_ours():
    message = refusal(
        one_route(
            {
                "backend": "mcp",
                "backend_config": {
                    "server_name": "docs-server",
                    "tool_name": "retrieve_docs",
                    "tool_arguments": {"domains": "${matched_domains}"},
                },
            }
        )
    )
    assert "arguments" in message and "matched_domains" in message and "user_content" in message


# -- the decision shape -------------------------------------------------------------------


def test_the_real_upstream_configuration_loads_with_its_warnings_listed():
    config, warnings = loaded(upstream_data())
    assert [d.name for d in config.routing.decisions] == BY_PRIORITY
    decisions = config.decisions
    assert decisions["urgent_automix_route"].keywords == [
        "urgent",
        "immediate",
        "asap",
        "emergency",
    ]
    assert "neural network" in decisions["mlp_experimental_route"].keywords
    support = decisions["support_router_dc_route"]
    assert support.examples[0] == "how to configure the system"
    assert support.similarity_threshold == 0.75 and support.match_description is False
    assert decisions["admin_adaptive_route"].model == "qwen3-32b"
    retrieving = [name for name in BY_PRIORITY if config.pipeline_for(name) is not None]
    assert retrieving == BY_PRIORITY[2:8]  # the six with a rag plugin
    text = "\n".join(warnings)
    for listed in [
        "projection support_escalated",  # AND with an unmapped leaf
        "language es",  # a classifier signal
        "NOT jailbreak prompt_injection",
        "'header_mutation' is not supported",  # another plugin
        "['qwen3-32b'] are not selected among",  # further model refs
        "ignored: algorithm",
        "ignored: adaptations",
        "min_confidence_threshold",
        "reuse_cache_connection",
        "/srv/router/.parallel-rag/milvus.db",
        "workflow_mode",
        "file_ids",
        "method 'ngram' is matched as whole words",
        "auth_scheme: Bearer",
    ]:
        assert listed in text, listed
    # nothing listed twice, and nothing listed about a signal no rule uses
    assert len(warnings) == len(set(warnings))
    assert "code_keywords" not in text and "fuzzy_sensitive_keywords" not in text


def test_upstream_top_level_sections_are_listed_as_ignored(tmp_path):
    data = upstream_data()
    data.update(version="v0.3", listeners=[{"name": "http", "port": 8899}])
    data["global"] = {"router": {"auto_model_name": "MoM"}, "model_catalog": {"kbs": []}}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    config, pipeline, _ = load_router(path)
    assert pipeline is None
    text = "\n".join(config.warnings)
    assert "version:" in text and "listeners:" in text
    assert "global.router:" in text and "global.model_catalog.kbs:" in text


def test_our_own_example_configuration_loads_without_warnings():
    config, _, _ = load_router(EXAMPLES / "router.yaml")
    assert config.warnings == []


def test_a_decision_without_modelrefs_or_model_is_refused_naming_model():
    data = one_route({"backend": "vectorstore", "backend_config": {"vector_store_id": "vs"}})
    del data["routing"]["decisions"][0]["model"]
    assert "routing.decisions.0.model" in refusal(data)


# -- matching: priority, an embedding signal's own threshold, descriptions that document ---


def matcher_for(data: dict):
    from parallel_rag.studio.router.runtime import RouterRuntime

    return RouterRuntime(parse_router(data), Path("/srv/router"), compile_graphs=False).matcher


def test_priority_orders_routes_so_a_keyword_tie_goes_to_the_highest():
    data = upstream_data()
    low, high = data["routing"]["decisions"][1], data["routing"]["decisions"][-1]
    assert (low["name"], high["name"]) == ("urgent_automix_route", "mlp_experimental_route")
    high["priority"] = 999  # now above every other decision
    choice = matcher_for(data).choose("auto", "Urgent: my neural network will not train")
    assert (choice.name, choice.reason) == ("mlp_experimental_route", "keyword")
    assert set(choice.signals["keywords"]) == {"urgent_automix_route", "mlp_experimental_route"}


def test_an_embedding_signal_keeps_its_own_threshold():
    matcher = matcher_for(upstream_data())
    choice = matcher.choose("auto", "How do I configure the system?")
    assert (choice.name, choice.reason) == ("support_router_dc_route", "similarity")
    assert choice.signals["route_thresholds"] == {"support_router_dc_route": 0.75}
    # near in topic, under the signal's 0.75 (over our default 0.45): not this route
    data = upstream_data()
    data["routing"]["default"] = "fallback_knn_route"
    loose = matcher_for(data).choose("auto", "Which settings does the installer ask about?")
    assert loose.signals["similarity"]["support_router_dc_route"] < 0.75
    assert loose.name == "fallback_knn_route" and loose.reason == "default"


def test_a_translated_decision_never_matches_on_its_description():
    data = upstream_data()
    data["routing"]["default"] = "fallback_knn_route"
    matcher = matcher_for(data)
    description = "Spanish-language route that observes Router Learning adaptation with Milvus RAG."
    choice = matcher.choose("auto", description)  # its own description, word for word
    assert "spanish_adaptive_route" not in choice.signals["similarity"]
    assert choice.name == "fallback_knn_route"


# -- the rules 6-8 -----------------------------------------------------------------


RANKER = {
    "global": {"model_catalog": {"deployments": {"ranker": {"artifact": "some/ranker"}}}},
}


def ranked_route(rerank: dict) -> dict:
    data = one_route(
        {
            "backend": "vectorstore",
            "backend_config": {"vector_store_id": "vs"},
            "top_k": 50,
            "rerank": rerank,
        }
    )
    data.update(copy.deepcopy(RANKER))
    data["routing"]["model_bindings"] = {"rag.reranker": {"deployment": "ranker"}}
    return data


def test_rerank_without_top_k_scores_every_candidate():
    reranker = parse_router(ranked_route({})).pipeline_for("r").reranker
    assert reranker.top_k is None  # every candidate is kept...
    assert reranker.max_candidates == 50  # ...and every one of the 50 is scored


def test_route_preview_shows_the_rerank_budget():
    from parallel_rag.studio.router.runtime import RouterRuntime

    config = parse_router(ranked_route({"top_k": 3, "max_candidates": 30}))
    runtime = RouterRuntime(config, Path("/srv/router"), compile_graphs=False)
    preview = runtime.preview({"model": "r", "messages": [{"role": "user", "content": "q"}]})
    rerank = preview["plan"]["rerank"]
    assert (rerank["top_k"], rerank["max_candidates"]) == (3, 30)
    assert "max_candidates=30" in rerank["scorer"]  # the cached context's scorer identity


def test_rerank_budget_is_settable_from_the_plugin_rerank_block():
    config = parse_router(ranked_route({"top_k": 3, "max_candidates": 30}))
    reranker = config.pipeline_for("r").reranker
    assert (reranker.top_k, reranker.max_candidates) == (3, 30)


def test_mcp_route_naming_an_undeclared_server_is_refused_at_load():
    data = one_route(
        {"backend": "mcp", "backend_config": {"server_name": "elsewhere", "tool_name": "search"}}
    )
    message = refusal(data)
    assert (
        "routing.decisions.0.plugins.0.configuration.backend_config.server_name: "
        "no MCP server 'elsewhere' under mcp_servers (declared: ['docs-server'])"
    ) in message


@pytest.mark.parametrize("policy", ["block", "warn", "skip"])
def test_retrieval_route_without_user_text_follows_on_failure(policy):
    import asyncio

    from parallel_rag.studio.router.errors import RouterError
    from parallel_rag.studio.router.runtime import RouterRuntime

    data = one_route(
        {
            "backend": "vectorstore",
            "backend_config": {"vector_store_id": "vs"},
            "on_failure": policy,
        }
    )
    runtime = RouterRuntime(parse_router(data), Path("/srv/router"), compile_graphs=False)
    body = {"model": "r", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    if policy == "block":
        with pytest.raises(RouterError) as caught:
            asyncio.run(runtime.prepare_chat(body))
        assert (caught.value.status, caught.value.code) == (503, "on_failure_block")
        assert "no user message with text" in str(caught.value)
        return
    forward, _, report = asyncio.run(runtime.prepare_chat(body))
    assert forward["messages"] == body["messages"] and forward["model"] == "m"
    warned = [w for w in report["warnings"] if "no user message with text" in w]
    assert len(warned) == (1 if policy == "warn" else 0)


def test_cache_results_false_turns_the_route_cache_off_and_ttl_sets_its_lifetime():
    from parallel_rag.studio.router.runtime import RouterRuntime

    def route_cache(**fields):
        data = one_route(
            {"backend": "vectorstore", "backend_config": {"vector_store_id": "vs"}, **fields}
        )
        runtime = RouterRuntime(parse_router(data), Path("/srv/router"), compile_graphs=False)
        return runtime.routes["r"].cache

    assert route_cache(cache_results=False) is None
    assert route_cache(cache_results=True, cache_ttl_seconds=600).ttl == 600
    assert route_cache().ttl == 300  # routing.context_cache's


# -- behaviour differences from upstream, each pinned -------------------------------------


def plain_route(**fields):
    from parallel_rag.studio.router.runtime import RouterRuntime

    data = one_route(
        {"backend": "vectorstore", "backend_config": {"vector_store_id": "vs"}, **fields}
    )
    config = parse_router(data)
    return config, RouterRuntime(config, Path("/srv/router"), compile_graphs=False).routes["r"]


def test_on_failure_defaults_to_warn_where_upstream_skips():
    config, _ = plain_route()
    assert config.decisions["r"].rag.on_failure == "warn"


def test_context_cache_is_on_by_default_where_upstream_caches_only_with_cache_results():
    _, route = plain_route()
    assert route.cache is not None


def test_similarity_threshold_unset_means_none_where_upstream_uses_0_7():
    config, _ = plain_route()
    assert config.pipeline_for("r").retrievers[0].similarity_threshold is None
