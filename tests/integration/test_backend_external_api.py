"""``external_api`` against loopback servers speaking Pinecone's, Weaviate's, Elasticsearch's and
a custom wire format (tests/integration/backend_servers.py), plus every failure a network
backend must turn into a clear, secret-free branch error.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from backend_servers import (
    BRIDGE_QUESTION,
    TENANT_DOCS,
    LoopbackServer,
    Reply,
    VectorIndex,
    custom_route,
    elasticsearch_route,
    pinecone_route,
    weaviate_route,
)
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.shared.json_http import DEFAULT_MAX_RESPONSE_BYTES, BackendRequestError
from parallel_rag.graph import build_graph
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.nodes.failure_policy import BlockedError
from servers import free_port

ExternalAPIEntry = ENTRY_MODELS["external_api"]

pytestmark = pytest.mark.integration

KEY = "sk-test-SECRET-4f9a2c7e"
EXTRA = "hdr-SECRET-91b0"
CUSTOM_TEMPLATE = '{"q": "{{query}}", "k": {{top_k}}, "min": {{threshold}}, "filters": {{filters}}}'
ACME = {"tenant": "acme"}


@pytest.fixture(scope="module")
def index() -> VectorIndex:
    return VectorIndex(load_embeddings(), TENANT_DOCS)


@pytest.fixture(scope="module")
def pinecone(index):
    with LoopbackServer(pinecone_route(index, KEY)) as server:
        yield server


@pytest.fixture(scope="module")
def weaviate(index):
    with LoopbackServer(weaviate_route(index, "Passage", KEY)) as server:
        yield server


@pytest.fixture(scope="module")
def elasticsearch():
    with LoopbackServer(elasticsearch_route(TENANT_DOCS, "docs", KEY)) as server:
        yield server


@pytest.fixture(scope="module")
def custom():
    with LoopbackServer(custom_route(TENANT_DOCS, KEY)) as server:
        yield server


def external(backend_config: dict, **entry):
    """A retriever built the way the graph builds it: config entry -> factory."""
    validated = ExternalAPIEntry.model_validate(
        {"backend": "external_api", "backend_config": backend_config, **entry}
    )
    return build_retriever(validated, Path.cwd(), EmbeddingsConfig())


def pinecone_config(server, **extra) -> dict:
    return {
        "endpoint": f"{server.url}/query",
        "request_format": "pinecone",
        "api_key": KEY,
        **extra,
    }


def weaviate_config(server, **extra) -> dict:
    return {
        "endpoint": f"{server.url}/v1/graphql",
        "request_format": "weaviate",
        "api_key": KEY,
        "class_name": "Passage",
        "properties": ["tenant", "source"],
        **extra,
    }


def es_config(server, **extra) -> dict:
    return {
        "endpoint": f"{server.url}/docs/_search",
        "request_format": "elasticsearch",
        "api_key": KEY,
        "filter_field_suffix": ".keyword",
        **extra,
    }


def custom_config(server, **extra) -> dict:
    return {
        "endpoint": f"{server.url}/search",
        "request_format": "custom",
        "api_key": KEY,
        "request_template": CUSTOM_TEMPLATE,
        "content_field": "text",
        **extra,
    }


# ------------------------------------------------------------------------------- pinecone


def test_pinecone_query_api_request_and_response(pinecone):
    docs = external(pinecone_config(pinecone, namespace="")).invoke(BRIDGE_QUESTION, k=3)
    sent = pinecone.requests[-1]
    body = sent.json()
    assert sent.path == "/query" and sent.headers["Api-Key"] == KEY
    assert len(body["vector"]) == 384 and body["topK"] == 3 and body["includeMetadata"] is True
    assert "filter" not in body
    assert docs[0].id in {"acme-bridge", "globex-bridge"}
    assert "Golden Gate" in docs[0].page_content and "content" not in docs[0].metadata
    assert 0 < docs[0].metadata["retrieval_score"] <= 1


def test_pinecone_tenant_filter_never_returns_another_tenant(pinecone):
    retriever = external(pinecone_config(pinecone))
    unfiltered = {d.metadata["tenant"] for d in retriever.invoke(BRIDGE_QUESTION, k=6)}
    assert unfiltered == {"acme", "globex"}  # the filter is what keeps globex out
    docs = retriever.invoke(BRIDGE_QUESTION, k=6, filters=ACME)
    assert pinecone.requests[-1].json()["filter"] == {"tenant": {"$eq": "acme"}}
    assert docs and {d.metadata["tenant"] for d in docs} == {"acme"}


def test_pinecone_threshold_and_several_filter_keys(pinecone):
    retriever = external(pinecone_config(pinecone), similarity_threshold=0.5)
    docs = retriever.invoke(
        BRIDGE_QUESTION, filters={"tenant": "acme", "source": "acme/bridges.md"}
    )
    assert pinecone.requests[-1].json()["filter"] == {
        "$and": [{"tenant": {"$eq": "acme"}}, {"source": {"$eq": "acme/bridges.md"}}]
    }
    assert [d.id for d in docs] == ["acme-bridge"]
    assert all(d.metadata["retrieval_score"] >= 0.5 for d in docs)


def test_pinecone_is_dense(pinecone):
    assert external(pinecone_config(pinecone)).retrieval_kind == "dense"


# ------------------------------------------------------------------------------- weaviate


def test_weaviate_near_text_graphql_query(weaviate):
    from graphql import parse

    docs = external(weaviate_config(weaviate)).invoke(BRIDGE_QUESTION, k=2, filters=ACME)
    query = weaviate.requests[-1].json()["query"]
    parse(query)  # valid GraphQL
    assert "nearText" in query and "where" in query and "valueText" in query
    assert [d.id for d in docs][:1] == ["00000000-0000-0000-0000-000000000000"]
    assert {d.metadata["tenant"] for d in docs} == {"acme"}
    assert docs[0].metadata["source"] == "acme/bridges.md"
    assert 0 < docs[0].metadata["retrieval_score"] <= 1  # 1 - cosine distance


def test_weaviate_tenant_filter_never_returns_another_tenant(weaviate):
    retriever = external(weaviate_config(weaviate))
    assert {d.metadata["tenant"] for d in retriever.invoke(BRIDGE_QUESTION, k=6)} == {
        "acme",
        "globex",
    }
    for tenant in ("acme", "globex"):
        docs = retriever.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": tenant})
        assert docs and {d.metadata["tenant"] for d in docs} == {tenant}


def test_weaviate_threshold_is_sent_as_max_distance(weaviate):
    docs = external(weaviate_config(weaviate), similarity_threshold=0.45).invoke(BRIDGE_QUESTION)
    assert "distance: 0.55" in weaviate.requests[-1].json()["query"]
    assert docs and all(d.metadata["retrieval_score"] >= 0.45 for d in docs)


def test_weaviate_bm25_is_lexical_with_string_scores(weaviate):
    retriever = external(weaviate_config(weaviate, search="bm25"))
    assert retriever.retrieval_kind == "lexical"
    docs = retriever.invoke("Halley comet years", k=5, filters={"tenant": "globex"})
    assert "bm25" in weaviate.requests[-1].json()["query"]
    assert [d.metadata["source"] for d in docs] == ["globex/comets.md"]
    assert docs[0].metadata["retrieval_score"] > 0


def test_weaviate_graphql_errors_are_branch_errors(weaviate):
    retriever = external(weaviate_config(weaviate, class_name="Missing"))
    with pytest.raises(Exception, match="weaviate GraphQL errors: Cannot query field"):
        retriever.invoke(BRIDGE_QUESTION)


# ------------------------------------------------------------------------------- elasticsearch


def test_elasticsearch_search_request_and_response(elasticsearch):
    docs = external(es_config(elasticsearch)).invoke("Unix Bell Labs", k=4, filters=ACME)
    sent = elasticsearch.requests[-1]
    assert sent.path == "/docs/_search" and sent.headers["Authorization"] == f"ApiKey {KEY}"
    assert sent.json()["query"]["bool"] == {
        "must": [{"match": {"content": "Unix Bell Labs"}}],
        "filter": [{"term": {"tenant.keyword": "acme"}}],
    }
    assert sent.json()["size"] == 4
    assert docs[0].id == "acme-unix" and docs[0].metadata["source"] == "acme/unix.md"


def test_elasticsearch_tenant_filter_never_returns_another_tenant(elasticsearch):
    retriever = external(es_config(elasticsearch))
    assert {d.metadata["tenant"] for d in retriever.invoke("Golden Gate Bridge 1937")} == {
        "acme",
        "globex",
    }
    docs = retriever.invoke("Golden Gate Bridge 1937", filters={"tenant": "globex"})
    assert [d.id for d in docs] == ["globex-bridge"]


def test_elasticsearch_is_lexical_and_refuses_a_threshold(elasticsearch):
    assert external(es_config(elasticsearch)).retrieval_kind == "lexical"
    with pytest.raises(ValueError, match="similarity_threshold: does not apply"):
        external(es_config(elasticsearch), similarity_threshold=0.3)


# ------------------------------------------------------------------------------- custom


def test_custom_template_json_escapes_the_query(custom):
    tricky = 'Ken "the" Thompson \\ Unix\n"}, "k": 999'
    external(custom_config(custom)).invoke(tricky, k=2)
    body = custom.requests[-1].json()
    assert body == {"q": tricky, "k": 2, "min": None, "filters": {}}


def test_custom_tenant_filter_never_returns_another_tenant(custom):
    retriever = external(custom_config(custom), similarity_threshold=0.2)
    docs = retriever.invoke("Halley comet", k=5, filters={"tenant": "acme"})
    assert custom.requests[-1].json()["filters"] == {"tenant": "acme"}
    assert custom.requests[-1].json()["min"] == 0.2
    assert [d.id for d in docs] == ["acme-comet"]
    assert docs[0].page_content.startswith("Halley")


def test_custom_template_without_filters_refuses_a_filtered_request(custom):
    template = '{"q": "{{query}}", "k": {{top_k}}}'
    retriever = external(custom_config(custom, request_template=template))
    before = len(custom.requests)
    with pytest.raises(ValueError, match="no \\{\\{filters\\}\\} placeholder"):
        retriever.invoke("Halley", filters=ACME)
    assert len(custom.requests) == before  # nothing was sent


def test_a_hit_contradicting_the_filter_is_dropped():
    """A service that ignores the filter still cannot leak another tenant's document."""
    leaky = {"results": [{"id": d["id"], "text": d["content"], "metadata": d} for d in TENANT_DOCS]}
    with LoopbackServer(lambda request: Reply(200, leaky)) as server:
        retriever = external(custom_config(server, score_field=None))
        docs = retriever.invoke("anything", k=10, filters=ACME)
    assert docs and {d.metadata["tenant"] for d in docs} == {"acme"}


# ------------------------------------------------------------------------------- failures


def test_non_2xx_reports_status_and_a_bounded_body_excerpt():
    body = ("upstream exploded " * 2000).encode()
    with LoopbackServer(lambda request: Reply(503, body)) as server:
        with pytest.raises(BackendRequestError) as caught:
            external(custom_config(server)).invoke("q")
    message = str(caught.value)
    assert "HTTP 503" in message and "upstream exploded" in message
    assert len(message) < 400


def test_malformed_json_is_a_clear_error():
    with LoopbackServer(lambda request: Reply(200, b'{"results": [oops')) as server:
        with pytest.raises(BackendRequestError, match="malformed JSON"):
            external(custom_config(server)).invoke("q")


@pytest.mark.parametrize(
    ("make_config", "answer", "expected"),
    [
        (es_config, {"took": 1}, "elasticsearch response: missing field 'hits'"),
        (es_config, {"hits": {"hits": [{"_id": "x", "_score": 1}]}}, "missing field '_source'"),
        (pinecone_config, {"matches": [{"id": "x", "score": 0.5}]}, "missing field 'metadata'"),
        (pinecone_config, {"matches": [{"id": "x", "score": "high", "metadata": {}}]}, "score"),
        (weaviate_config, {"data": {"Get": {}}}, "missing field 'Passage'"),
        (custom_config, {"items": []}, "custom response: missing field 'results'"),
        (custom_config, {"results": [{"id": "x"}]}, "missing field 'text'"),
    ],
)
def test_missing_fields_are_clear_errors(make_config, answer, expected):
    with LoopbackServer(lambda request: Reply(200, answer)) as server:
        with pytest.raises(BackendRequestError, match=expected):
            external(make_config(server)).invoke("q")


def test_read_timeout():
    with LoopbackServer(lambda request: Reply(200, {"results": []}, delay=3)) as server:
        started = time.perf_counter()
        with pytest.raises(BackendRequestError, match="timed out"):
            external(custom_config(server, timeout_seconds=0.5)).invoke("q")
        assert time.perf_counter() - started < 2.5


def test_connection_refused():
    endpoint = f"http://127.0.0.1:{free_port()}/search"
    config = {**custom_config(type("S", (), {"url": ""})), "endpoint": endpoint}
    with pytest.raises(BackendRequestError, match="ConnectError"):
        external(config, timeout_seconds=2).invoke("q")


def _exact_body(size: int) -> bytes:
    """A valid custom-format answer of exactly ``size`` bytes (padded with spaces)."""
    core = json.dumps({"results": [{"id": "a", "text": "Unix", "score": 1.0}]}).encode()
    return core + b" " * (size - len(core))


@pytest.mark.parametrize("chunked", [False, True])
def test_max_response_bytes_exact_limit_passes_one_more_fails(chunked):
    limit = 5000

    def route(request):
        size = int(request.json()["q"])
        body = _exact_body(size)
        return Reply(200, iter([body[:1000], body[1000:]]) if chunked else body)

    with LoopbackServer(route) as server:
        retriever = external(custom_config(server, max_response_bytes=limit))
        assert [d.id for d in retriever.invoke(str(limit))] == ["a"]
        with pytest.raises(BackendRequestError, match="exceeds max_response_bytes \\(5000"):
            retriever.invoke(str(limit + 1))


def test_default_cap_is_4_mib_and_the_stream_stops_there():
    """0 (like omitted) means 4 MiB; a 64 MiB chunked body is abandoned after the cap."""
    assert DEFAULT_MAX_RESPONSE_BYTES == 4 * 1024 * 1024
    chunk = b" " * 65536

    def huge(request):
        return Reply(200, (chunk for _ in range(1024)))

    with LoopbackServer(huge) as server:
        started = time.perf_counter()
        with pytest.raises(BackendRequestError, match=f"\\({DEFAULT_MAX_RESPONSE_BYTES} bytes"):
            external(custom_config(server, max_response_bytes=0)).invoke("q")
        elapsed = time.perf_counter() - started
        time.sleep(0.2)
        assert server.bytes_sent < 32 * 1024 * 1024  # the client hung up long before 64 MiB
    assert elapsed < 10


def test_declared_content_length_over_the_cap_fails_before_reading():
    with LoopbackServer(lambda request: Reply(200, _exact_body(3000))) as server:
        with pytest.raises(BackendRequestError, match="response of 3000 bytes exceeds"):
            external(custom_config(server, max_response_bytes=2999)).invoke("q")


# ------------------------------------------------------------------------------- secrets


def test_api_key_never_appears_in_errors_records_or_logs(caplog):
    """A service echoing the credentials back, and a key in the URL, still leak nothing."""

    def echo(request):
        sent = f"{request.headers.get('Authorization')} {request.headers.get('X-Extra')}"
        return Reply(401, f"bad credentials: {sent}".encode())

    caplog.set_level(logging.DEBUG)
    with LoopbackServer(echo) as server:
        config = custom_config(
            server, endpoint=f"{server.url}/search?key={KEY}", headers={"X-Extra": EXTRA}
        )
        with pytest.raises(BackendRequestError) as caught:
            external(config).invoke("q")
        assert "HTTP 401" in str(caught.value) and "bad credentials" in str(caught.value)
        assert KEY not in str(caught.value) and KEY not in repr(caught.value.__context__)
        assert EXTRA not in str(caught.value)

        graph = build_graph(
            {
                "retrievers": [
                    {"name": "api", "backend": "external_api", "backend_config": config},
                    {
                        "name": "api2",
                        "backend": "external_api",
                        "backend_config": {**config, "api_key": KEY + "-2"},
                    },
                ],
                "generator": {"min_similarity": None},
            }
        )
        result = graph.invoke({"query": "q"})
    dumped = json.dumps(result, default=str)
    assert "HTTP 401" in dumped
    assert KEY not in dumped
    assert KEY not in caplog.text and EXTRA not in dumped
    assert KEY not in repr(graph)


# ------------------------------------------------------------------------------- in the graph


def test_failures_go_through_on_failure_and_other_branches_answer(pinecone, elasticsearch):
    broken = {**es_config(elasticsearch), "endpoint": f"http://127.0.0.1:{free_port()}/x/_search"}
    config = {
        "retrievers": [
            {
                "name": "pinecone",
                "backend": "external_api",
                "backend_config": pinecone_config(pinecone),
            },
            {"name": "es", "backend": "external_api", "backend_config": broken},
        ],
        "generator": {"min_similarity": None},
    }
    result = build_graph(config).invoke({"query": BRIDGE_QUESTION, "tenant": "acme"})
    status = {b["retriever"]: b["status"] for b in result["branches"]}
    assert status == {"pinecone": "ok", "es": "failed"}
    assert any("ConnectError" in w for w in result["warnings"])
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"acme"}

    config["retrievers"][1]["on_failure"] = "block"
    with pytest.raises(BlockedError, match="retriever 'es'"):
        build_graph(config).invoke({"query": BRIDGE_QUESTION})
