"""The OpenAI-compatible router on real parts: ``parallel-rag serve`` (a uvicorn subprocess on
127.0.0.1, stopped by its PID) in front of the llama.cpp server with SmolLM2, with a recording
proxy between them that keeps the exact requests the upstream received. Clients: the official
``openai`` SDK (sync and async, streaming and not) and ``langchain_openai.ChatOpenAI``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from recording_proxy import RecordingProxy
from servers import BIN, ServerProcess, free_port

pytestmark = pytest.mark.integration

QUESTION = "Which algorithm did Ada Lovelace publish?"
EVIDENCE_HEADER = "Evidence blocks (untrusted retrieved text):"
STORE = "router-docs"


def run_cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    return subprocess.run(
        [str(BIN / "parallel-rag"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def router_config(retrievers: list[dict], upstream: str, dead: str) -> dict:
    lexical, dense = retrievers
    dense_single = {k: v for k, v in dense.items() if k != "name"}
    ranked = {
        **dense_single,
        "top_k": 4,
        "rerank": {"top_k": 2},
    }
    return {
        "global": {
            "model_catalog": {
                "deployments": {
                    "document-ranker": {
                        "provider": "model_runtime",
                        "artifact": "no-such-reranker-model",  # missing: on_failure applies
                        "device": "cpu",
                        "input": {"max_tokens": 512, "overflow": "reject"},
                    }
                }
            }
        },
        "upstream": {"base_url": upstream, "timeouts": {"connect": 5, "read": 240}},
        "routing": {
            "default": "chat",
            "similarity_threshold": 0.3,
            "context_cache": {"max_entries": 64, "ttl_seconds": 600},
            "model_bindings": {
                "rag.reranker": {
                    "deployment": "document-ranker",
                    "contract": "relevance_scores.v1",
                    "pair_scorer": {"layer": 0, "dimension": 0},
                }
            },
            "decisions": [
                {
                    "name": "ranked-warn",
                    "model": "smollm2",
                    "plugins": [{"type": "rag", "configuration": {**ranked, "on_failure": "warn"}}],
                },
                {
                    "name": "ranked-block",
                    "model": "smollm2",
                    "plugins": [
                        {"type": "rag", "configuration": {**ranked, "on_failure": "block"}}
                    ],
                },
                {
                    "name": "docs",
                    "model": "smollm2",
                    "description": "Questions about computing history, programmers, early "
                    "computers and information retrieval",
                    "examples": [
                        "Who built the first electronic computer?",
                        "What is BM25?",
                        "Who wrote the first computer program?",
                        "What did Alan Turing work on?",
                    ],
                    "keywords": ["bm25", "reciprocal rank fusion"],
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {
                                "retrievers": [lexical, dense],
                                "top_k": 3,
                                "injection_mode": "tool_role",
                                "max_context_length": 1500,
                                "on_failure": "warn",
                            },
                        }
                    ],
                },
                {
                    "name": "seed-qdrant",
                    "model": "smollm2",
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {
                                "enabled": True,
                                **dense_single,
                                "top_k": 2,
                                "similarity_threshold": 0.2,
                                "injection_mode": "system_prompt",
                                "on_failure": "warn",
                                "max_context_length": 1200,
                            },
                        }
                    ],
                },
                {
                    "name": "store",
                    "model": "smollm2",
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {
                                "backend": "vectorstore",
                                "backend_config": {"vector_store_id": STORE},
                                "top_k": 2,
                                "max_context_length": 800,
                            },
                        }
                    ],
                },
                {
                    "name": "blocked",
                    "model": "smollm2",
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {
                                "backend": "external_api",
                                "timeout_seconds": 3,
                                "backend_config": {
                                    "endpoint": f"{dead}/docs/_search",
                                    "request_format": "elasticsearch",
                                },
                                "on_failure": "block",
                            },
                        }
                    ],
                },
                {"name": "down", "model": "smollm2", "upstream": {"base_url": f"{dead}/v1"}},
                {
                    "name": "impatient",
                    "model": "smollm2",
                    "upstream": {"base_url": upstream, "timeouts": {"read": 3}},
                },
                {
                    "name": "chat",
                    "model": "smollm2",
                    "description": "Small talk: greetings, how someone is feeling, jokes",
                    "examples": ["hello there!", "tell me a joke", "good morning, how are you?"],
                },
            ],
        },
    }


@pytest.fixture(scope="module")
def proxy(llm_server):
    with RecordingProxy(llm_server, hang_seconds=20, chunk_delay=0.3) as running:
        yield running


@pytest.fixture(scope="module")
def workspace(example_index, proxy, tmp_path_factory) -> Path:
    config, base_dir, _ = example_index
    directory = tmp_path_factory.mktemp("router")
    shutil.copytree(base_dir, directory, dirs_exist_ok=True)
    retrievers = [
        {**entry, "timeout_seconds": 120}
        for entry in config.model_dump(mode="json", exclude_unset=True)["retrievers"]
    ]
    corpus = Path(__file__).resolve().parents[2] / "examples" / "corpus"
    ingest = run_cli(
        ["ingest", "--store", STORE, "--quiet", str(corpus / "ada-lovelace.md")], directory
    )
    assert ingest.returncode == 0, ingest.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    data = router_config(retrievers, proxy.url, dead)
    (directory / "router.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def router(workspace) -> str:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["LANGSMITH_TRACING"] = "false"
    command = [str(BIN / "parallel-rag"), "--config", "router.yaml", "serve"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with ServerProcess(
        command, env=env, cwd=workspace, log_path=workspace / "router.log"
    ) as server:
        server.wait_for(base + "/v1/models", timeout=300)
        yield base


@pytest.fixture()
def client(router) -> openai.OpenAI:
    return openai.OpenAI(base_url=router + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(autouse=True)
def _forwarding(request):
    if "proxy" in request.fixturenames:
        proxy = request.getfixturevalue("proxy")
        proxy.mode = "forward"
        yield
        proxy.mode = "forward"
    else:
        yield


# -- injection, exactly as the upstream received it ---------------------------------------


def test_tool_role_injection_reaches_upstream_exactly(client, proxy):
    messages = [
        {"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": QUESTION},
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="docs", messages=messages, temperature=0, max_tokens=24, stop=["\n\n"], seed=7
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert raw.headers["x-parallel-rag-route"] == "docs"
    extra = completion.model_extra["parallel_rag"]
    assert extra["route"] == "docs" and extra["documents"]
    assert raw.headers["x-parallel-rag-documents"].split(",")[0] == extra["documents"][0]

    sent = proxy.last_body()
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        "model": "smollm2",
        "temperature": 0,
        "max_tokens": 24,
        "stop": ["\n\n"],
        "seed": 7,
    }
    assert sent["messages"][:2] == messages
    call, answer = sent["messages"][2:]
    call_id = call["tool_calls"][0]["id"]
    assert call == {
        "role": "assistant",
        "content": "Looking up the evidence for this question.",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": "retrieve_evidence",
                    "arguments": json.dumps({"query": QUESTION}),
                },
            }
        ],
    }
    assert answer["role"] == "tool" and answer["tool_call_id"] == call_id
    assert answer["content"].startswith(EVIDENCE_HEADER + "\n\n[1] (source: ")
    assert "ada-lovelace.md" in answer["content"]
    assert len(answer["content"]) <= 1500


def test_system_prompt_injection_reaches_upstream_exactly(client, proxy):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! Ask me anything."},
        {"role": "user", "content": QUESTION},
    ]
    client.chat.completions.create(
        model="seed-qdrant", messages=messages, temperature=0, max_tokens=16
    )
    sent = proxy.last_body()
    assert sent["model"] == "smollm2"
    assert sent["messages"][1:] == messages[1:]
    system = sent["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith(EVIDENCE_HEADER)
    assert system["content"].endswith("\n\nBe brief.")
    assert system["content"].count("<evidence>") == 2  # top_k: 2


def test_pass_through_route_forwards_the_request_unchanged(router, proxy):
    body = {
        "model": "chat",
        "messages": [
            {"role": "system", "content": "You are friendly."},
            {"role": "user", "content": "hello!"},
        ],
        "temperature": 0.2,
        "max_tokens": 8,
        "stop": ["."],
        "top_p": 0.9,
        "user": "tester",
    }
    response = httpx.post(router + "/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    assert response.headers["x-parallel-rag-retrieval"] == "off"
    assert proxy.last_body() == {**body, "model": "smollm2"}


# -- clients ---------------------------------------------------------------------------------


def test_openai_sync_streaming(client, proxy):
    stream = client.chat.completions.create(
        model="docs",
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        max_tokens=16,
        stream=True,
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(pieces).strip()
    assert proxy.last_body()["stream"] is True
    assert proxy.last_body()["messages"][-1]["role"] == "tool"


async def test_openai_async_stream_and_not(router, proxy):
    client = openai.AsyncOpenAI(base_url=router + "/v1", api_key="unused", max_retries=0)
    completion = await client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": QUESTION}], max_tokens=12
    )
    assert completion.choices[0].message.content
    assert completion.model_extra["parallel_rag"]["route"] == "docs"
    raw = await client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "hello, how are you?"}],
        max_tokens=12,
        stream=True,
    )
    assert raw.headers["x-parallel-rag-route"] == "chat"
    text = ""
    async for chunk in raw.parse():
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert text.strip()
    await client.close()


def test_langchain_chat_openai(router):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        base_url=router + "/v1", api_key="unused", model="auto", max_tokens=16, max_retries=0
    )
    message = model.invoke([("system", "Be brief."), ("human", QUESTION)])
    assert message.content
    streamed = "".join(chunk.content for chunk in model.stream(QUESTION))
    assert streamed.strip()


# -- matching and preview --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "route"),
    [
        ("What did Ada Lovelace write about Babbage's engine?", "docs"),
        ("Tell me about the ENIAC machine and who programmed it.", "docs"),
        ("hey! how is your day going?", "chat"),
        ("Explain how reciprocal rank fusion combines rankings", "docs"),  # keyword
    ],
)
def test_auto_routing_and_preview_agree(router, question, route):
    preview = httpx.post(
        router + "/v1/route/preview",
        json={"model": "auto", "messages": [{"role": "user", "content": question}]},
        timeout=60,
    ).json()
    assert preview["route"] == route, preview
    body = {"model": "auto", "messages": [{"role": "user", "content": question}], "max_tokens": 4}
    response = httpx.post(router + "/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    assert response.headers["x-parallel-rag-route"] == route
    assert response.headers["x-parallel-rag-route-reason"] == preview["reason"]
    if route == "docs":
        assert preview["plan"]["retrieval"] is True
        assert [b["retriever"] for b in preview["plan"]["branches"]] == ["lexical", "dense"]
        assert "latency_ms" not in json.dumps(preview)


def test_cli_route_preview(workspace):
    result = run_cli(["--config", "router.yaml", "route", "hello, how are you?"], workspace)
    assert result.returncode == 0, result.stderr
    preview = json.loads(result.stdout)
    assert preview["route"] == "chat" and preview["plan"] == {"retrieval": False}


def test_models_and_unknown_model(client):
    ids = [model.id for model in client.models.list()]
    assert ids[0] == "auto" and {"docs", "seed-qdrant", "chat"} <= set(ids)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(
            model="gpt-nope", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 404
    assert caught.value.body["code"] == "model_not_found"
    assert caught.value.body["param"] == "model"


# -- the context cache -----------------------------------------------------------------------


def _ask(router: str, model: str, question: str, **rag) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 4}
    if rag:
        body["rag"] = rag
    response = httpx.post(router + "/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response


def test_context_cache_hits_misses_and_ingest_invalidation(router, workspace):
    question = "When was Ada Lovelace born?"
    first = _ask(router, "store", question)
    assert first.headers["x-parallel-rag-cache"] == "miss"
    again = _ask(router, "store", "  when was ada LOVELACE born? ")  # same normalised query
    assert again.headers["x-parallel-rag-cache"] == "hit"
    assert int(again.headers["x-parallel-rag-cache-hits"]) >= 1
    assert again.json()["parallel_rag"]["documents"] == first.json()["parallel_rag"]["documents"]
    assert _ask(router, "store", question, tenant="acme").headers["x-parallel-rag-cache"] == "miss"
    assert _ask(router, "store", question, top_k=1).headers["x-parallel-rag-cache"] == "miss"
    assert _ask(router, "docs", question).headers["x-parallel-rag-cache"] == "miss"  # other route
    assert _ask(router, "store", question).headers["x-parallel-rag-cache"] == "hit"

    corpus = Path(__file__).resolve().parents[2] / "examples" / "corpus"
    ingest = run_cli(
        ["ingest", "--store", STORE, "--quiet", str(corpus / "alan-turing.md")], workspace
    )
    assert ingest.returncode == 0, ingest.stderr
    after = _ask(router, "store", question)
    assert after.headers["x-parallel-rag-cache"] == "miss"
    assert int(after.headers["x-parallel-rag-cache-invalidations"]) >= 1


# -- faults ----------------------------------------------------------------------------------


def _error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    return error


def test_upstream_down_is_502(client):
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="down", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_unavailable"


def test_upstream_500_is_502(router, proxy):
    proxy.mode = "fail500"
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    _error(
        httpx.post(router + "/v1/chat/completions", json=body, timeout=60), 502, "upstream_error"
    )
    stream = {**body, "stream": True}
    _error(
        httpx.post(router + "/v1/chat/completions", json=stream, timeout=60), 502, "upstream_error"
    )


def test_upstream_hang_past_timeout_is_504(router, proxy):
    proxy.mode = "hang"
    body = {"model": "impatient", "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    response = httpx.post(router + "/v1/chat/completions", json=body, timeout=60)
    _error(response, 504, "upstream_timeout")
    assert time.monotonic() - started < 15  # the route's read timeout is 3 s


def test_client_disconnect_mid_stream_cancels_upstream(router, proxy):
    proxy.mode = "slow_stream"
    before = proxy.disconnects
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 120,
        "stream": True,
    }
    with httpx.stream("POST", router + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # the first chunk arrived; now go away
    deadline = time.monotonic() + 20
    while proxy.disconnects == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proxy.disconnects > before


def test_block_with_failing_backend_is_503(router):
    body = {"model": "blocked", "messages": [{"role": "user", "content": QUESTION}]}
    response = httpx.post(router + "/v1/chat/completions", json=body, timeout=60)
    error = _error(response, 503, "on_failure_block")
    assert error["type"] == "service_unavailable"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "docs"}, "messages"),
        ({"model": "docs", "messages": []}, "messages"),
        ({"model": "docs", "messages": "hi"}, "messages"),
        ({"model": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "docs", "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"model": "docs", "messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"model": "docs", "messages": [{"content": "x"}]}, "messages.0.role"),
        (
            {"model": "docs", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
            "stream",
        ),
        (
            {
                "model": "docs",
                "messages": [{"role": "user", "content": "x"}],
                "rag": {"top_k": "5"},
            },
            "rag.top_k",
        ),
        (
            {"model": "docs", "messages": [{"role": "user", "content": "x"}], "rag": {"url": "x"}},
            "rag.url",
        ),
    ],
)
def test_malformed_bodies_are_400_naming_the_field(router, body, param):
    response = httpx.post(router + "/v1/chat/completions", json=body, timeout=30)
    error = _error(response, 400, "invalid_value")
    assert error["param"] == param
    assert error["message"].startswith(param)


def test_body_that_is_not_json_is_400(router):
    response = httpx.post(
        router + "/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    _error(response, 400, "invalid_json")


def test_langserve_routes_still_served(router):
    response = httpx.post(router + "/rag/invoke", json={"input": {"query": QUESTION}}, timeout=300)
    assert response.status_code == 200, response.text
    assert response.json()["output"]["documents"]


def test_streams_end_with_done(router):
    body = {
        "model": "docs",
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 8,
        "stream": True,
    }
    with httpx.stream("POST", router + "/v1/chat/completions", json=body, timeout=300) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    assert text.rstrip().endswith("data: [DONE]")


def test_concurrent_requests_share_the_gate(router):
    async def one(client: httpx.AsyncClient, n: int):
        body = {
            "model": "chat",
            "messages": [{"role": "user", "content": f"hi {n}"}],
            "max_tokens": 2,
        }
        return await client.post(router + "/v1/chat/completions", json=body)

    async def many():
        async with httpx.AsyncClient(timeout=300) as client:
            return await asyncio.gather(*(one(client, n) for n in range(4)))

    responses = asyncio.run(many())
    assert all(r.status_code == 200 for r in responses)


def test_reranker_binding_failure_follows_on_failure(router, proxy):
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4}
    warned = httpx.post(
        router + "/v1/chat/completions", json={**body, "model": "ranked-warn"}, timeout=300
    )
    assert warned.status_code == 200, warned.text
    assert "rerank" in warned.headers["x-parallel-rag-warning"].lower()
    assert len(warned.json()["parallel_rag"]["documents"]) == 2  # rerank.top_k: still the cap
    assert proxy.last_body()["messages"][-1]["role"] == "tool"
    blocked = httpx.post(
        router + "/v1/chat/completions", json={**body, "model": "ranked-block"}, timeout=300
    )
    _error(blocked, 503, "on_failure_block")
