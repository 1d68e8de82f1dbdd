"""A real vLLM Semantic Router configuration served as it is: upstream's own
``config/config.yaml`` decisions and rag plugins (tests/support/semantic_router/config.yaml)
behind ``parallel-rag serve`` (a uvicorn subprocess on 127.0.0.1, stopped by its PID), the
``openai`` client in front. Behind it, the upstream "model" is a loopback server answering
OpenAI chat completions with a fixed reply and keeping every request it received: what is under
test is what reaches the model (route, model name, injected evidence), not the model's prose
(the llama.cpp SmolLM2 server of test_router.py covers a real model behind the same router).
The only lines added to upstream's file are ours (the upstream model server, the default route,
the MCP server the mcp route names) and the search services' addresses, pointed at loopback
servers that speak their wire formats (the real embedding model ranks their documents)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
import yaml
from app_servers import running_serve
from backend_servers import BRIDGE_QUESTION, LoopbackServer, Reply, VectorIndex, openai_route
from parallel_rag.backends.encoders.embeddings import load_embeddings
from servers import free_port

pytestmark = pytest.mark.integration

UPSTREAM_CONFIG = (
    Path(__file__).resolve().parents[1] / "support" / "semantic_router" / "config.yaml"
)
OPENAI_KEY = "openai-file-search-key"  # the configuration's own key
SEARCH_KEY = "search-api-key"
MANUALS = [
    {
        "id": "manual-bridge",
        "tenant": "acme",
        "source": "manuals/bridges.md",
        "attributes": {"doc_type": "manual"},
        "content": "The Golden Gate Bridge opened in 1937 and spans the Golden Gate strait.",
    },
    {
        "id": "note-bridge",
        "tenant": "acme",
        "source": "notes/bridges.md",
        "attributes": {"doc_type": "note"},
        "content": "The Golden Gate Bridge was painted International Orange in 1937.",
    },
]
ADMIN_DOC = "Admin accounts are rotated every 90 days; the rotation runbook is RB-17."


def admin_search(request) -> Reply:
    """The admin route's custom search service: upstream's template, our placeholders."""
    if request.headers.get("X-API-Key") != SEARCH_KEY:
        return Reply(401, {"detail": "bad key"})
    if request.headers.get("X-Environment") != "admin":
        return Reply(400, {"detail": "no environment"})
    body = request.json()
    if "nothing" in body["query"]:  # an empty result, not a failure
        return Reply(200, {"results": []})
    return Reply(
        200,
        {"results": [{"id": "rb-17", "content": ADMIN_DOC, "score": 0.9, "echo": body}]},
    )


@pytest.fixture(scope="module")
def services():
    manuals = VectorIndex(load_embeddings(), MANUALS)
    with (
        LoopbackServer(openai_route(manuals, "vs_docs_prod", OPENAI_KEY)) as files,
        LoopbackServer(admin_search) as admin,
    ):
        yield {"openai": files, "admin": admin}


def chat_completion(request) -> Reply:
    """An OpenAI-compatible ``POST /v1/chat/completions`` answering one fixed token."""
    if request.path != "/v1/chat/completions":
        return Reply(404, {"error": {"message": f"no route {request.path}"}})
    body = request.json()
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        },
    )


@pytest.fixture(scope="module")
def model_server():
    with LoopbackServer(chat_completion) as running:
        yield running


def configured(services, model_server) -> dict:
    data = yaml.safe_load(UPSTREAM_CONFIG.read_text(encoding="utf-8"))
    data["upstream"] = {"base_url": model_server.url + "/v1"}
    data["routing"]["default"] = "fallback_knn_route"
    data["mcp_servers"] = {
        "docs-server": {"transport": "streamable_http", "url": f"http://127.0.0.1:{free_port()}"}
    }
    plugins = {
        d["name"]: d["plugins"][0]["configuration"]
        for d in data["routing"]["decisions"]
        if d.get("plugins")
    }
    # the services' addresses: the one deployment-specific value of each block
    plugins["fallback_knn_route"]["backend_config"]["base_url"] = services["openai"].url
    plugins["admin_adaptive_route"]["backend_config"]["endpoint"] = services["admin"].url + "/q"
    return data


@pytest.fixture(scope="module")
def router(services, model_server, tmp_path_factory):
    directory = tmp_path_factory.mktemp("semantic-router")
    config = directory / "router.yaml"
    config.write_text(yaml.safe_dump(configured(services, model_server)), encoding="utf-8")
    with running_serve(config, directory) as (server, base):
        yield base, server, directory


@pytest.fixture()
def client(router) -> openai.OpenAI:
    return openai.OpenAI(base_url=router[0] + "/v1", api_key="unused", max_retries=0, timeout=300)


def ask(client, question: str, model: str = "auto"):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=1
    )
    return raw.headers, raw.parse()


def last_upstream_request(model_server) -> dict:
    return model_server.requests[-1].json()


def test_start_up_lists_what_did_not_map_with_the_local_store_path(router):
    _, server, directory = router
    log = server.log()
    milvus_db = str((directory / ".parallel-rag" / "milvus.db").resolve())
    for listed in [
        "min_confidence_threshold",
        "reuse_cache_connection",
        milvus_db,
        "uri: http://MILVUS_HOST:19530",
        "language es",
        "'header_mutation' is not supported",
        "workflow_mode",
    ]:
        assert listed in log, listed


@pytest.mark.parametrize(
    ("question", "route", "reason", "model"),
    [
        ("This is urgent: the deploy is down.", "urgent_automix_route", "keyword", "qwen3-8b"),
        ("How do I train a neural network?", "mlp_experimental_route", "keyword", "qwen3-8b"),
        ("How do I configure the system?", "support_router_dc_route", "similarity", "qwen3-8b"),
    ],
)
def test_auto_routes_the_questions_upstream_rules_target(
    client, model_server, question, route, reason, model
):
    headers, reply = ask(client, question)
    assert headers["x-parallel-rag-route"] == route
    assert headers["x-parallel-rag-route-reason"] == reason
    assert headers["x-parallel-rag-retrieval"] == "off"
    assert reply.choices[0].message.content == "ok"
    sent = last_upstream_request(model_server)
    assert sent["model"] == model  # modelRefs[0]
    assert sent["messages"] == [{"role": "user", "content": question}]


def test_unmatched_question_goes_to_the_default_openai_route_with_the_translated_filter(
    client, model_server, services
):
    headers, _ = ask(client, BRIDGE_QUESTION)
    assert headers["x-parallel-rag-route"] == "fallback_knn_route"
    assert headers["x-parallel-rag-route-reason"] == "default"
    search = services["openai"].requests[-1]
    assert search.path == "/v1/vector_stores/vs_docs_prod/search"  # base_url had no /v1
    assert search.json()["filters"] == {"type": "eq", "key": "doc_type", "value": "manual"}
    assert headers["x-parallel-rag-documents"].startswith("file-manual-bridge")
    messages = last_upstream_request(model_server)["messages"]
    call, answer = messages[1], messages[2]  # our strict-valid tool_role turn
    assert call["role"] == "assistant" and call["tool_calls"][0]["id"] == answer["tool_call_id"]
    assert "Golden Gate Bridge opened in 1937" in answer["content"]
    assert "International Orange" not in answer["content"]  # a note, not a manual


def test_route_by_name_runs_the_upstream_custom_template(client, model_server, services):
    headers, _ = ask(client, 'Who rotates "admin" accounts?', model="admin_adaptive_route")
    assert headers["x-parallel-rag-route"] == "admin_adaptive_route"
    sent = services["admin"].requests[-1].json()
    assert sent["query"] == 'Who rotates "admin" accounts?'  # JSON-escaped, not spliced
    assert sent["top_k"] == 6
    messages = last_upstream_request(model_server)["messages"]
    assert messages[0]["role"] == "system" and ADMIN_DOC in messages[0]["content"]
    assert last_upstream_request(model_server)["model"] == "qwen3-32b"


def test_milvus_route_without_connection_settings_answers_with_a_warning(client):
    headers, reply = ask(client, "¿Qué es un puente colgante?", model="spanish_adaptive_route")
    assert headers["x-parallel-rag-route"] == "spanish_adaptive_route"
    assert "no context injected" in headers["x-parallel-rag-warning"]
    assert reply.choices


# -- behaviour differences from upstream, each pinned -------------------------------------


def test_tool_role_sends_an_assistant_tool_call_where_upstream_sends_a_bare_tool_message(
    client, model_server
):
    ask(client, BRIDGE_QUESTION, model="fallback_knn_route")
    messages = last_upstream_request(model_server)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    call = messages[1]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "retrieve_evidence"
    assert messages[2]["tool_call_id"] == call["id"]  # strict servers accept this history


def test_block_route_answers_503_on_an_empty_result_where_upstream_forwards(
    client, model_server, services
):
    before = len(model_server.requests)
    with pytest.raises(openai.APIStatusError) as caught:
        ask(client, "Is there nothing about this?", model="admin_adaptive_route")
    assert caught.value.status_code == 503
    assert caught.value.body["code"] == "on_failure_block"
    assert "retrieval found no documents" in caught.value.body["message"]
    assert services["admin"].requests[-1].json()["query"] == "Is there nothing about this?"
    assert len(model_server.requests) == before  # the model was never asked
