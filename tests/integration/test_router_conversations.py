"""Conversations through the OpenAI-compatible router on real parts: ``parallel-rag serve`` (a
uvicorn subprocess on 127.0.0.1, stopped by its PID) on the example corpus, in front of the
llama.cpp server with SmolLM2 behind a recording proxy that keeps the exact requests it
received; the client is the official ``openai`` SDK.

A follow-up ("Who designed it?") is retrieved on with its subject carried over from the earlier
turns, so the upstream receives the document the conversation is about; the same follow-up at
the end of two conversations about different bridges gets each its own evidence (and its own
context cache entry), while a repeat of a conversation hits the cache. A route with a
conversation model (SmolLM2 through the same proxy) asks it once per conversation: the
router's resolution and the graph's share the model's memo."""

from __future__ import annotations

import json
import os
import shutil

import httpx
import openai
import pytest
import yaml
from parallel_rag.nodes.prompts import CONDENSE_SYSTEM_PROMPT
from recording_proxy import RecordingProxy
from servers import BIN, ServerProcess, free_port

pytestmark = pytest.mark.integration

MILLAU = [
    {"role": "user", "content": "Which bridge carries the A75 autoroute in France?"},
    {"role": "assistant", "content": "The Millau Viaduct."},
    {"role": "user", "content": "Who designed it?"},
]
BROOKLYN = [
    {"role": "user", "content": "Which bridge in New York City opened in 1883?"},
    {"role": "assistant", "content": "The Brooklyn Bridge."},
    {"role": "user", "content": "Who designed it?"},
]


def docs_route(name: str, retrievers: list[dict], **extra) -> dict:
    configuration = {"retrievers": retrievers, "top_k": 3, "max_context_length": 1500, **extra}
    return {
        "name": name,
        "model": "smollm2",
        "plugins": [{"type": "rag", "configuration": configuration}],
    }


@pytest.fixture(scope="module")
def proxy(llm_server):
    with RecordingProxy(llm_server) as running:
        yield running


@pytest.fixture(scope="module")
def router(example_index, proxy, tmp_path_factory) -> str:
    config, base_dir, _ = example_index
    workspace = tmp_path_factory.mktemp("router-conversations")
    shutil.copytree(base_dir, workspace, dirs_exist_ok=True)
    retrievers = config.model_dump(mode="json", exclude_unset=True)["retrievers"]
    llm = {"model": "smollm2", "base_url": proxy.url, "temperature": 0, "max_tokens": 40}
    data = {
        "upstream": {"base_url": proxy.url, "timeouts": {"connect": 5, "read": 240}},
        "routing": {
            "default": "docs",
            "context_cache": {"max_entries": 64, "ttl_seconds": 600},
            "decisions": [
                docs_route("docs", retrievers),
                docs_route("docs-llm", retrievers, conversation={"llm": llm}),
            ],
        },
    }
    (workspace / "router.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["LANGSMITH_TRACING"] = "false"
    env.pop("PARALLEL_RAG_CONFIG", None)
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


def ask(client: openai.OpenAI, proxy: RecordingProxy, conversation: list[dict], model="docs"):
    """(the evidence the upstream received, the router's report, its cache header)."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=conversation, temperature=0, max_tokens=4
    )
    report = raw.parse().model_extra["parallel_rag"]
    sent = proxy.last_body()["messages"]
    assert sent[: len(conversation)] == conversation  # the caller's conversation, unchanged
    call, evidence = sent[len(conversation) :]
    assert evidence["role"] == "tool" and evidence["tool_call_id"] == call["tool_calls"][0]["id"]
    return call, evidence["content"], report, raw.headers["x-parallel-rag-cache"]


def first_source(evidence: str) -> str:
    return evidence.split("(source: ", 1)[1].split(")", 1)[0]


def test_a_follow_up_gets_the_document_of_its_subject(client, proxy):
    conversation = [{"role": "system", "content": "Answer in one sentence."}, *MILLAU]
    call, evidence, report, _ = ask(client, proxy, conversation)
    assert "millau-viaduct.md" in first_source(evidence)
    assert "Michel Virlogeux" in evidence
    resolution = report["resolution"]
    assert resolution["question"] == "Who designed it?"
    assert "Millau Viaduct" in resolution["retrieved_on"]  # "Who designed the Millau Viaduct?"
    assert resolution["method"] == "carry_over" and "Millau Viaduct" in resolution["subject"]
    arguments = json.loads(call["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"query": resolution["retrieved_on"]}  # what the evidence was found for
    # the last message alone (what the router retrieved on before) misses the viaduct
    _, alone, _, _ = ask(client, proxy, MILLAU[-1:])
    assert "millau-viaduct.md" not in alone


def test_the_same_follow_up_in_two_conversations_gets_each_its_own_evidence(client, proxy):
    _, millau, _, _ = ask(client, proxy, MILLAU)
    _, brooklyn, report, cache = ask(client, proxy, BROOKLYN)
    assert cache == "miss"  # not the Millau conversation's entry
    assert "brooklyn-bridge.md" in first_source(brooklyn)
    assert "millau-viaduct.md" in first_source(millau)
    assert brooklyn != millau
    assert "Brooklyn Bridge" in report["resolution"]["retrieved_on"]
    _, again, _, cache = ask(client, proxy, MILLAU)  # a repeat of a conversation: its entry
    assert (cache, again) == ("hit", millau)


def test_tool_turns_in_the_history_are_skipped_not_refused(client, proxy):
    # an agent's history: the assistant called a tool of its own before it answered
    call = {"id": "call_lookup", "type": "function", "function": {"name": "lookup"}}
    call["function"]["arguments"] = json.dumps({"q": "bridge opened 1883"})
    conversation = [
        BROOKLYN[0],
        {"role": "assistant", "content": "Let me look that up.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_lookup", "content": "Brooklyn Bridge, 1883"},
        BROOKLYN[1],
        BROOKLYN[2],
    ]
    _, evidence, report, _ = ask(client, proxy, conversation)
    assert "brooklyn-bridge.md" in first_source(evidence)
    assert "Brooklyn Bridge" in report["resolution"]["subject"]


def test_a_route_conversation_model_is_asked_once_per_conversation(client, proxy, router):
    def condense_calls() -> int:
        return sum(
            1
            for path, body in proxy.requests
            if path.endswith("/chat/completions")
            and body["messages"][0]["content"] == CONDENSE_SYSTEM_PROMPT
        )

    before = condense_calls()
    _, evidence, report, cache = ask(client, proxy, BROOKLYN, model="docs-llm")
    # the router resolves before its cache lookup and the graph resolves again: one call
    assert condense_calls() == before + 1
    assert cache == "miss" and report["resolution"]["question"] == "Who designed it?"
    _, again, repeat, cache = ask(client, proxy, BROOKLYN, model="docs-llm")
    assert (cache, again, repeat["resolution"]) == ("hit", evidence, report["resolution"])
    assert condense_calls() == before + 1
    preview = httpx.post(
        router + "/v1/route/preview", json={"model": "docs-llm", "messages": BROOKLYN}, timeout=60
    )
    assert preview.json()["resolution"] == report["resolution"]
    assert condense_calls() == before + 1
