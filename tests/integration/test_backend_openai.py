"""``openai`` (vector-store file search) against a loopback server speaking
``POST /v1/vector_stores/{id}/search`` (tests/integration/backend_servers.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from backend_servers import BRIDGE_QUESTION, TENANT_DOCS, LoopbackServer, VectorIndex, openai_route
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.shared.json_http import BackendRequestError
from parallel_rag.graph import build_graph
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, ConfigError, EmbeddingsConfig

OpenAIEntry = ENTRY_MODELS["openai"]

pytestmark = pytest.mark.integration

KEY = "sk-proj-TESTKEY-8d1e55b0c2"
STORE = "vs_tenant_docs"


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(
        openai_route(VectorIndex(load_embeddings(), TENANT_DOCS), STORE, KEY)
    ) as srv:
        yield srv


def settings(server, **extra) -> dict:
    return {"vector_store_id": STORE, "api_key": KEY, "base_url": f"{server.url}/v1", **extra}


def openai_retriever(backend_config: dict, **entry):
    validated = OpenAIEntry.model_validate(
        {"backend": "openai", "backend_config": backend_config, **entry}
    )
    return build_retriever(validated, Path.cwd(), EmbeddingsConfig())


def test_search_request_and_page_parsing(server):
    docs = openai_retriever(settings(server)).invoke(BRIDGE_QUESTION, k=3)
    sent = server.requests[-1]
    assert sent.path == f"/v1/vector_stores/{STORE}/search"
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.json() == {"query": BRIDGE_QUESTION, "max_num_results": 3, "rewrite_query": False}
    assert len(docs) == 3
    first = docs[0]
    assert first.id.startswith("file-") and "#" in first.id
    assert "Golden Gate" in first.page_content
    assert first.metadata["filename"] == "bridges.md"
    assert first.metadata["file_id"] in {"file-acme-bridge", "file-globex-bridge"}
    assert 0 < first.metadata["retrieval_score"] <= 1
    again = openai_retriever(settings(server)).invoke(BRIDGE_QUESTION, k=3)
    assert [d.id for d in again] == [d.id for d in docs]  # stable ids


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_base_url_is_accepted_with_or_without_v1(server, suffix):
    """vLLM Semantic Router's ``base_url: https://api.openai.com`` (no ``/v1``) reaches the
    same search endpoint as ours with ``/v1``."""
    docs = openai_retriever(settings(server, base_url=f"{server.url}{suffix}")).invoke(
        BRIDGE_QUESTION, k=2
    )
    assert server.requests[-1].path == f"/v1/vector_stores/{STORE}/search"
    assert len(docs) == 2


def test_tenant_filter_never_returns_another_tenant(server):
    retriever = openai_retriever(settings(server))
    assert {d.metadata["tenant"] for d in retriever.invoke(BRIDGE_QUESTION, k=6)} == {
        "acme",
        "globex",
    }
    docs = retriever.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": "globex"})
    assert server.requests[-1].json()["filters"] == {
        "type": "eq",
        "key": "tenant",
        "value": "globex",
    }
    assert docs and {d.metadata["tenant"] for d in docs} == {"globex"}


def test_static_filter_is_anded_with_the_request_filters(server):
    static = {"type": "ne", "key": "source", "value": "acme/unix.md"}
    retriever = openai_retriever(settings(server, filter=static, max_num_results=4))
    docs = retriever.invoke("Who developed Unix at Bell Labs?", k=20, filters={"tenant": "acme"})
    body = server.requests[-1].json()
    assert body["max_num_results"] == 4  # capped by max_num_results
    assert body["filters"] == {
        "type": "and",
        "filters": [static, {"type": "eq", "key": "tenant", "value": "acme"}],
    }
    assert docs and "acme-unix" not in {d.metadata["file_id"].removeprefix("file-") for d in docs}
    assert {d.metadata["tenant"] for d in docs} == {"acme"}


def test_threshold_becomes_ranking_options(server):
    docs = openai_retriever(settings(server), similarity_threshold=0.5).invoke(BRIDGE_QUESTION)
    assert server.requests[-1].json()["ranking_options"] == {
        "ranker": "auto",
        "score_threshold": 0.5,
    }
    assert docs and all(d.metadata["retrieval_score"] >= 0.5 for d in docs)


def test_api_key_from_the_environment(server, monkeypatch):
    config = settings(server)
    del config["api_key"]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert openai_retriever(config).invoke(BRIDGE_QUESTION, k=1)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigError, match="backend_config.api_key: not set"):
        openai_retriever(config)


def test_unknown_store_and_bad_key_are_clear_secret_free_errors(server, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(BackendRequestError, match="HTTP 404.*No vector store found"):
        openai_retriever(settings(server, vector_store_id="vs_missing")).invoke("q")
    wrong = "sk-proj-WRONGKEY-00000000"
    with pytest.raises(BackendRequestError, match="HTTP 401") as caught:
        openai_retriever(settings(server, api_key=wrong)).invoke("q")
    assert wrong not in str(caught.value) and wrong not in caplog.text
    assert KEY not in caplog.text


def test_response_cap(server):
    retriever = openai_retriever(settings(server, max_response_bytes=200))
    with pytest.raises(BackendRequestError, match="max_response_bytes \\(200"):
        retriever.invoke(BRIDGE_QUESTION)


def test_openai_branch_in_the_graph_with_a_tenant(server):
    graph = build_graph(
        {
            "retrievers": [
                {"name": "files", "backend": "openai", "backend_config": settings(server)},
                {
                    "name": "files2",
                    "backend": "openai",
                    "backend_config": settings(server, rewrite_query=True),
                },
            ],
            "generator": {"min_similarity": None},
        }
    )
    result = graph.invoke({"query": BRIDGE_QUESTION, "tenant": "acme", "top_k": 3})
    assert {b["status"] for b in result["branches"]} == {"ok"}
    assert result["documents"] and {d["metadata"]["tenant"] for d in result["documents"]} == {
        "acme"
    }
    assert KEY not in json.dumps(result, default=str)
