"""Load-time validation of every backend's settings (errors name the field) and request
translation, all offline: no store is opened and no request is sent."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from parallel_rag.backends.base import query_embedding, retrieval_kind_of
from parallel_rag.backends.external_api.retriever import (
    ExternalAPIRetriever,
    ExternalAPISettings,
    pinecone_filter,
    render_template,
    weaviate_where,
)
from parallel_rag.backends.hybrid.retriever import HybridRetriever
from parallel_rag.backends.milvus.expressions import check_filter_expression, milvus_expression
from parallel_rag.backends.milvus.retriever import MilvusRetriever
from parallel_rag.backends.openai_file_search.retriever import (
    OpenAIFileSearchRetriever,
    openai_filters,
)
from parallel_rag.backends.registry import BACKENDS
from parallel_rag.backends.shared.json_http import display_url, effective_max_bytes
from parallel_rag.backends.shared.secrets import REDACTED, redact, register_secrets
from parallel_rag.backends.vectorstore.retriever import VectorStoreRetriever
from parallel_rag.graph.components import make_retriever
from parallel_rag.graph.configuration import ConfigError
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import writable_targets

BM25 = {"name": "lexical", "backend": "bm25"}
PINECONE = {"endpoint": "https://idx.example/query", "request_format": "pinecone"}
TEMPLATE = '{"q": "{{query}}", "k": {{top_k}}, "t": {{threshold}}, "f": {{filters}}}'


def with_entry(entry: dict, **top) -> dict:
    return {"retrievers": [BM25, entry], **top}


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(config)
    return str(caught.value)


def external(**backend_config) -> dict:
    return {"name": "api", "backend": "external_api", "backend_config": backend_config}


# ------------------------------------------------------------------------------- field errors


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"backend": "milvus", "backend_config": {}},
            "retrievers.1.backend_config.collection: Field required",
        ),
        ({"backend": "milvus"}, "retrievers.1.backend_config: Field required"),
        (
            {"backend": "milvus", "backend_config": {"collection": "bad name;"}},
            "retrievers.1.backend_config.collection: String should match pattern",
        ),
        (
            external(request_format="pinecone"),
            "retrievers.1.backend_config.endpoint: Field required",
        ),
        (
            external(endpoint="ftp://x", request_format="pinecone"),
            "backend_config.endpoint: must be an http:// or https:// URL",
        ),
        (
            external(endpoint="http://x", request_format="solr"),
            "retrievers.1.backend_config.request_format: Input should be 'pinecone', 'weaviate'",
        ),
        (
            external(endpoint="http://x", request_format="custom"),
            "request_template: required when request_format is 'custom'",
        ),
        (
            external(endpoint="http://x", request_format="custom", request_template='{"k": 1}'),
            "request_template: must contain the {{query}} placeholder",
        ),
        (
            external(
                endpoint="http://x", request_format="custom", request_template='{"q": {{quer}}}'
            ),
            "unknown placeholder(s) ['quer']",
        ),
        (
            external(
                endpoint="http://x", request_format="custom", request_template='{"q": {{query}}}'
            ),
            'write string placeholders inside quotes: "{{query}}"',
        ),
        (
            external(endpoint="http://x", request_format="weaviate"),
            "class_name: required when request_format is 'weaviate'",
        ),
        (
            external(**PINECONE, max_response_bytes=-1),
            "backend_config.max_response_bytes: Input should be greater than or equal to 0",
        ),
        (
            external(**PINECONE, timeout_seconds=0),
            "backend_config.timeout_seconds: Input should be greater than 0",
        ),
        (external(**PINECONE, retrieval_kind="dense"), "retrieval_kind: only settable for"),
        (
            {**external(endpoint="http://x/_search", request_format="elasticsearch")}
            | {"similarity_threshold": 0.5},
            "similarity_threshold: does not apply to request_format 'elasticsearch'",
        ),
        (
            {"backend": "openai", "backend_config": {}},
            "retrievers.1.backend_config.vector_store_id: Field required",
        ),
        (
            {
                "backend": "openai",
                "backend_config": {"vector_store_id": "vs", "max_num_results": 0},
            },
            "backend_config.max_num_results: Input should be greater than or equal to 1",
        ),
        (
            {"backend": "openai", "backend_config": {"vector_store_id": "vs", "filter": {"a": 1}}},
            "backend_config.filter: filter: type must be one of",
        ),
        (
            {
                "backend": "openai",
                "backend_config": {"vector_store_id": "vs", "direct_search": False},
            },
            "backend_config.direct_search: Input should be True",
        ),
        (
            {"backend": "vectorstore", "backend_config": {}},
            "retrievers.1.backend_config.vector_store_id: Field required",
        ),
        (
            {"backend": "vectorstore", "backend_config": {"vector_store_id": "../etc"}},
            "backend_config.vector_store_id: String should match pattern",
        ),
        ({"backend": "hybrid", "backend_config": {}}, "backend_config.primary: Field required"),
        (
            {"backend": "hybrid", "backend_config": {"primary": {"backend": "hybrid"}}},
            "retrievers.1.backend_config.primary: a hybrid may not nest a hybrid",
        ),
        (
            {
                "backend": "hybrid",
                "backend_config": {
                    "primary": {"backend": "bm25"},
                    "fallback": {"backend": "hybrid", "backend_config": {}},
                },
            },
            "backend_config.fallback: a hybrid may not nest a hybrid",
        ),
        (
            {
                "backend": "hybrid",
                "backend_config": {"primary": {"backend": "bm25"}, "strategy": "race"},
            },
            "backend_config.strategy: Input should be 'sequential' or 'parallel'",
        ),
        (
            {
                "backend": "hybrid",
                "backend_config": {"primary": {"backend": "qdrant", "top_k": -3}},
            },
            "backend_config.primary.top_k: Input should be greater than 0",
        ),
        ({"backend": "qdrant", "top_k": 0}, "retrievers.1.top_k: Input should be greater than 0"),
        (
            {"backend": "milvus", "backend_config": {"collection": "c", "extra": 1}},
            "backend_config.extra: Extra inputs are not permitted",
        ),
    ],
)
def test_startup_validation_names_the_field(entry, expected):
    assert expected in error_of(with_entry(entry))


def mcp(**backend_config) -> dict:
    config = {"server_name": "docs", "tool_name": "search", **backend_config}
    return {"name": "tool", "backend": "mcp", "backend_config": config}


MCP_SERVERS = {"docs": {"transport": "stdio", "command": "docs-search", "args": ["--stdio"]}}


def test_mcp_names_a_declared_server_at_load_time():
    message = error_of(with_entry(mcp()))
    assert "retrievers.tool.backend_config.server_name: no MCP server 'docs'" in message
    nested = {"name": "h", "backend": "hybrid", "backend_config": {"primary": mcp()}}
    assert "retrievers.tool.backend_config.server_name" in error_of(with_entry(nested))

    config = parse_config(with_entry(mcp(retrieval_kind="dense"), mcp_servers=MCP_SERVERS))
    assert config.retrievers[1].backend_config.tool_name == "search"
    assert config.retrievers[1].is_dense
    assert not parse_config(with_entry(mcp(), mcp_servers=MCP_SERVERS)).retrievers[1].is_dense


@pytest.mark.parametrize(
    ("entry", "servers", "expected"),
    [
        (mcp(arguments={"q": "${query}"}), MCP_SERVERS, "unknown placeholder(s) ['query']"),
        (mcp(arguments={"top": "${top_k}"}), MCP_SERVERS, "${user_content} placeholder"),
        (mcp(transport="stdio"), MCP_SERVERS, "transport"),
        (mcp(), {"docs": {"transport": "streamable_http", "url": "ftp://x"}}, "match pattern"),
        (mcp(), {"docs": {"transport": "smoke-signals"}}, "mcp_servers.docs"),
    ],
)
def test_mcp_settings_are_checked_at_load_time(entry, servers, expected):
    assert expected in error_of(with_entry(entry, mcp_servers=servers))


def test_a_seed_plugin_block_pastes_in_unchanged():
    seed = {
        "enabled": True,
        "backend": "milvus",
        "top_k": 5,
        "similarity_threshold": 0.78,
        "injection_mode": "tool_role",
        "on_failure": "warn",
        "backend_config": {
            "collection": "docs",
            "reuse_cache_connection": True,
            "content_field": "content",
        },
    }
    entry = parse_config(with_entry(seed)).retrievers[1]
    assert entry.name == "milvus" and entry.backend_config.collection == "docs"


# ------------------------------------------------------------------------------- milvus filters


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('tenant == "a"; drop collection', "';' is not allowed"),
        ("year > 2000 -- comment", "comments are not allowed"),
        ("year > 2000 /* x */", "comments are not allowed"),
        ("year > 2000 # x", "comments are not allowed"),
        ("id in (select id from docs)", "SQL keyword(s) not allowed: from, select"),
        ("DROP == 1", "SQL keyword(s) not allowed: drop"),
        ("a == 1 UNION b == 2", "not allowed: union"),
        ("(year > 2000", "unbalanced parentheses"),
        ("year > 2000)", "unbalanced parentheses"),
        ('lang in ["en", "fr"', "unbalanced parentheses"),
        ('tenant == "open', "unterminated string literal"),
    ],
)
def test_filter_expression_refusals(expression, expected):
    with pytest.raises(ValueError, match=expected.replace("(", "\\(").replace(")", "\\)")):
        check_filter_expression(expression)
    message = error_of(
        with_entry(
            {
                "backend": "milvus",
                "backend_config": {"collection": "c", "filter_expression": expression},
            }
        )
    )
    assert "retrievers.1.backend_config.filter_expression" in message


@pytest.mark.parametrize(
    "expression",
    [
        'tenant == "acme" and (year > 2000 or lang in ["en", "fr"])',
        'title == "select -- drop (it"',  # keywords, comments, parentheses inside strings
        'metadata["kind"] == "report" and not (score < 0.5)',
        'title like "Unix%"',
    ],
)
def test_filter_expression_accepts_plain_milvus_expressions(expression):
    assert check_filter_expression(f"  {expression} ") == expression


def test_milvus_expression_in_both_metadata_layouts():
    filters = {"tenant": 'ac"me', "year": 2020, "score": 0.5, "draft": False}
    assert milvus_expression(filters, None) == (
        'tenant == "ac\\"me" and year == 2020 and score == 0.5 and draft == false'
    )
    assert milvus_expression({"tenant": "acme"}, "metadata", "year > 1") == (
        '(year > 1) and metadata["tenant"] == "acme"'
    )
    assert milvus_expression(None, None) is None
    with pytest.raises(ValueError, match="not a valid Milvus field name"):
        milvus_expression({"bad key": 1}, None)


def milvus_entry(**backend_config) -> dict:
    return {
        "name": "m",
        "backend": "milvus",
        "backend_config": {"collection": "c", **backend_config},
    }


def test_milvus_full_text_is_a_lexical_branch_with_bm25_defaults():
    config = parse_config(with_entry(milvus_entry(search="full_text")))
    entry = config.retrievers[1]
    assert entry.retrieval_kind == "lexical"
    searcher = make_retriever(entry, config, Path("."))
    assert retrieval_kind_of(searcher) == "lexical" and query_embedding(searcher) is None
    index = entry.backend_config.full_text_index_params()
    assert index["metric_type"] == "BM25"
    assert index["params"] == {"bm25_k1": 1.5, "bm25_b": 0.75}  # the bm25 backend's defaults
    dense = parse_config(with_entry(milvus_entry())).retrievers[1]
    assert dense.retrieval_kind == "dense"


@pytest.mark.parametrize(
    ("backend_config", "expected"),
    [
        ({"bm25_k1": 1.2}, "backend_config: bm25_k1: only applies with search: full_text"),
        ({"analyzer_params": {"type": "english"}}, "analyzer_params: only applies with search"),
        (
            {"sparse_field": "words"},
            "backend_config: sparse_field: only applies with search: full_text",
        ),
        ({"search": "bm25"}, "backend_config.search: Input should be 'dense' or 'full_text'"),
        ({"search": "full_text", "bm25_b": 2}, "backend_config.bm25_b: Input should be less"),
        ({"search": "full_text", "sparse_field": "a b"}, "sparse_field: String should match"),
    ],
)
def test_milvus_full_text_settings_are_checked_at_load_time(backend_config, expected):
    assert expected in error_of(with_entry(milvus_entry(**backend_config)))


def test_milvus_full_text_refuses_a_similarity_threshold():
    entry = {**milvus_entry(search="full_text"), "similarity_threshold": 0.5}
    assert "BM25 scores" in error_of(with_entry(entry))


# ------------------------------------------------------------------------------- wire helpers


def test_custom_template_values_are_json_encoded():
    import json

    rendered = render_template(
        TEMPLATE, query='say "hi"\\\n', top_k=7, threshold=None, filters={"tenant": "a"}
    )
    assert json.loads(rendered) == {"q": 'say "hi"\\\n', "k": 7, "t": None, "f": {"tenant": "a"}}


def test_filter_languages():
    assert pinecone_filter({"tenant": "a"}) == {"tenant": {"$eq": "a"}}
    assert pinecone_filter({"tenant": "a", "n": 2}) == {
        "$and": [{"tenant": {"$eq": "a"}}, {"n": {"$eq": 2}}]
    }
    assert weaviate_where({"tenant": "a"}) == '{path: ["tenant"], operator: Equal, valueText: "a"}'
    assert weaviate_where({"n": 2, "ok": True, "x": 1.5}) == (
        '{operator: And, operands: [{path: ["n"], operator: Equal, valueInt: 2}, '
        '{path: ["ok"], operator: Equal, valueBoolean: true}, '
        '{path: ["x"], operator: Equal, valueNumber: 1.5}]}'
    )
    with pytest.raises(ValueError, match="not a valid Weaviate property name"):
        weaviate_where({"bad-key": "x"})
    static = {"type": "eq", "key": "lang", "value": "en"}
    assert openai_filters(None, None) is None
    assert openai_filters(static, None) == static
    assert openai_filters(static, {"tenant": "a"}) == {
        "type": "and",
        "filters": [static, {"type": "eq", "key": "tenant", "value": "a"}],
    }


def test_response_cap_default_and_display_url():
    assert effective_max_bytes(None) == effective_max_bytes(0) == 4 * 1024 * 1024
    assert effective_max_bytes(10) == 10
    assert display_url("https://user:pw@host:9200/docs/_search?api_key=k") == (
        "https://host:9200/docs/_search"
    )


def test_secrets_are_redacted_in_text_and_in_http_logs(caplog):
    register_secrets(["sk-unit-secret-123"])
    assert redact("key sk-unit-secret-123 here") == f"key {REDACTED} here"
    assert redact("short ab", ["ab"]) == "short ab"  # too short to be a key
    caplog.set_level(logging.INFO, logger="httpx")
    logging.getLogger("httpx").info("HTTP Request: POST http://h/x?key=sk-unit-secret-123")
    assert "sk-unit-secret-123" not in caplog.text and REDACTED in caplog.text


def test_settings_never_print_their_keys():
    settings = ExternalAPISettings(
        **PINECONE, api_key="pc-secret-key-1", headers={"X-Token": "hdr-secret-2"}
    )
    for secret in ("pc-secret-key-1", "hdr-secret-2"):
        assert secret not in repr(settings) and secret not in str(settings.model_dump())
    retriever = ExternalAPIRetriever(settings=settings)
    assert "pc-secret-key-1" not in repr(retriever)
    assert retriever._headers()["X-Token"] == "hdr-secret-2"
    assert retriever._headers()["Api-Key"] == "pc-secret-key-1"


# ------------------------------------------------------------------------------- factories


def test_every_seed_backend_has_a_factory():
    assert set(BACKENDS) == {
        "bm25",
        "qdrant",
        "qdrant_edge",
        "milvus",
        "external_api",
        "openai",
        "vectorstore",
        "hybrid",
        "mcp",
    }


def test_factories_build_retrievers_without_connecting(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0001")
    config = parse_config(
        {
            "retrievers": [
                {"name": "m", "backend": "milvus", "backend_config": {"collection": "c"}},
                external(**PINECONE),
                {"name": "o", "backend": "openai", "backend_config": {"vector_store_id": "vs_1"}},
                {
                    "name": "v",
                    "backend": "vectorstore",
                    "backend_config": {"vector_store_id": "kb"},
                },
            ]
        }
    )
    built = [make_retriever(entry, config, tmp_path) for entry in config.retrievers]
    kinds = [type(r) for r in built]
    assert kinds == [
        MilvusRetriever,
        ExternalAPIRetriever,
        OpenAIFileSearchRetriever,
        VectorStoreRetriever,
    ]
    assert [retrieval_kind_of(r) for r in built] == ["dense"] * 4
    assert built[2].api_key.get_secret_value() == "sk-env-key-0001"


@pytest.mark.parametrize(
    ("backend_config", "kind"),
    [
        (PINECONE, "dense"),
        (
            {"endpoint": "http://w/v1/graphql", "request_format": "weaviate", "class_name": "A"},
            "dense",
        ),
        (
            {
                "endpoint": "http://w/v1/graphql",
                "request_format": "weaviate",
                "class_name": "A",
                "search": "bm25",
            },
            "lexical",
        ),
        ({"endpoint": "http://e/i/_search", "request_format": "elasticsearch"}, "lexical"),
        (
            {"endpoint": "http://c", "request_format": "custom", "request_template": TEMPLATE},
            "lexical",
        ),
        (
            {
                "endpoint": "http://c",
                "request_format": "custom",
                "request_template": TEMPLATE,
                "retrieval_kind": "dense",
            },
            "dense",
        ),
    ],
)
def test_external_api_kind_follows_the_request_format(backend_config, kind, tmp_path):
    config = parse_config(with_entry(external(**backend_config)))
    assert config.retrievers[1].is_dense is (kind == "dense")
    assert retrieval_kind_of(make_retriever(config.retrievers[1], config, tmp_path)) == kind


def test_hybrid_factory_names_timeouts_and_kind(tmp_path):
    hybrid = {
        "name": "kb",
        "backend": "hybrid",
        "timeout_seconds": 7,
        "backend_config": {
            "strategy": "parallel",
            "primary": {"backend": "external_api", "backend_config": PINECONE},
            "fallback": {"backend": "bm25", "timeout_seconds": 2},
        },
    }
    config = parse_config(with_entry(hybrid))
    assert config.retrievers[1].is_dense  # dense because its primary is
    built = make_retriever(config.retrievers[1], config, tmp_path)
    assert isinstance(built, HybridRetriever) and built.strategy == "parallel"
    assert (built.primary_name, built.fallback_name) == ("external_api", "bm25")
    assert (built.primary_timeout_seconds, built.fallback_timeout_seconds) == (7, 2)
    assert built.retrieval_kind == "dense"


def test_hybrid_legs_get_distinct_names():
    hybrid = {
        "backend": "hybrid",
        "backend_config": {"primary": {"backend": "qdrant"}, "fallback": {"backend": "qdrant"}},
    }
    legs = parse_config(with_entry(hybrid)).retrievers[1].backend_config
    assert (legs.primary.name, legs.fallback.name) == ("qdrant-primary", "qdrant-fallback")


def test_hyde_accepts_any_dense_backend():
    rewriter = {"kind": "hyde", "llm": {"model": "m", "base_url": "http://llm"}}
    for entry in (
        {"backend": "milvus", "backend_config": {"collection": "c"}},
        {"backend": "openai", "backend_config": {"vector_store_id": "vs"}},
        {"backend": "vectorstore", "backend_config": {"vector_store_id": "kb"}},
        {"backend": "hybrid", "backend_config": {"primary": {"backend": "qdrant"}}},
    ):
        parse_config(with_entry(entry, rewriter=rewriter))
    lexical = external(endpoint="http://e/i/_search", request_format="elasticsearch")
    assert "needs at least one dense" in error_of(with_entry(lexical, rewriter=rewriter))


def test_ingest_targets_include_hybrid_legs_once(tmp_path):
    config = parse_config(
        {
            "retrievers": [
                BM25,
                {"name": "dense", "backend": "qdrant"},
                {
                    "name": "kb",
                    "backend": "hybrid",
                    "backend_config": {
                        "primary": {"backend": "external_api", "backend_config": PINECONE},
                        "fallback": {"backend": "qdrant"},
                    },
                },
                {"name": "m", "backend": "milvus", "backend_config": {"collection": "c"}},
            ]
        }
    )
    assert [e.backend for e in writable_targets(config)] == ["bm25", "qdrant", "milvus"]


def test_relative_store_paths_start_at_the_config_directory(tmp_path):
    config = parse_config(
        with_entry({"backend": "vectorstore", "backend_config": {"vector_store_id": "kb"}})
    )
    built = make_retriever(config.retrievers[1], config, tmp_path)
    assert built.settings.store_dir(built.base_dir) == (
        tmp_path / ".parallel-rag" / "vector_stores" / "kb"
    )
    assert Path(built.settings.store_dir(built.base_dir)).is_absolute()
