"""vLLM Semantic Router's whole ``config/config.yaml`` (tests/support/semantic_router/
config-whole.yaml) served by ``parallel-rag serve`` (a subprocess on 127.0.0.1, stopped by its
PID) as a migrating user has it: no line of ours added. Its models' ``backend_refs`` are the
upstreams; the only change is the deployment's addresses (``endpoint: 127.0.0.1:8000`` and
``:8001``, the two model servers its decisions name) pointed at loopback servers answering
OpenAI chat completions and keeping what they received, so the test sees which server, model
name and key each request reached."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from app_servers import running_serve
from backend_servers import LoopbackServer, Reply

pytestmark = pytest.mark.integration

WHOLE_CONFIG = (
    Path(__file__).resolve().parents[1] / "support" / "semantic_router" / "config-whole.yaml"
)
PRIMARY_KEY = "primary-key-from-the-environment"  # the ref's api_key_env names its variable


def chat_completion(request) -> Reply:
    if request.path != "/v1/chat/completions":
        return Reply(404, {"error": {"message": f"no route {request.path}"}})
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": request.json()["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
        },
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    directory = tmp_path_factory.mktemp("semantic-router-whole")
    with (
        LoopbackServer(chat_completion) as small,
        LoopbackServer(chat_completion) as large,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("VLLM_SR_PRIMARY_API_KEY", PRIMARY_KEY)
        text = WHOLE_CONFIG.read_text(encoding="utf-8")
        for theirs, server in (("127.0.0.1:8000", small), ("127.0.0.1:8001", large)):
            assert text.count(f"endpoint: {theirs}") == 1
            text = text.replace(f"endpoint: {theirs}", f"endpoint: {server.url.split('://')[1]}")
        config = directory / "config.yaml"
        config.write_text(text, encoding="utf-8")
        with running_serve(config, directory) as (server, base):
            yield {"base": base, "server": server, "small": small, "large": large}


def ask(served, question: str, model: str = "auto"):
    client = openai.OpenAI(base_url=served["base"] + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=1
    )
    return raw.headers, raw.parse()


def header(request, name: str) -> str | None:
    return {k.lower(): v for k, v in request.headers.items()}.get(name)


def test_start_up_lists_what_did_not_map(served):
    log = served["server"].log()
    for listed in [
        "no weighted balancing here: every request goes to 'local-primary' (weight 80)",
        "api_format: 'anthropic'",
        "no MCP server 'docs-server' under mcp_servers",
        "a plain route 'qwen3-8b' is added and is routing.default",
        "language es",
    ]:
        assert listed in log, listed


def test_an_unmatched_question_goes_to_the_default_model_on_its_backend_ref(served):
    headers, reply = ask(served, "Tell me about the sea.")
    assert (headers["x-parallel-rag-route"], headers["x-parallel-rag-route-reason"]) == (
        "qwen3-8b",
        "default",
    )
    assert reply.choices[0].message.content == "ok"
    sent = served["small"].requests[-1]
    assert sent.json()["model"] == "qwen3-8b"
    assert header(sent, "authorization") == f"Bearer {PRIMARY_KEY}"


def test_a_keyword_route_forwards_to_its_models_backend_ref(served):
    headers, _ = ask(served, "This is urgent: the deploy is down.")
    assert headers["x-parallel-rag-route"] == "urgent_automix_route"
    assert served["small"].requests[-1].json()["messages"][-1]["content"].startswith("This is")


def test_a_route_on_the_other_model_reaches_the_other_server_without_a_key(served):
    before = len(served["small"].requests)
    headers, _ = ask(served, "Why did my question fail?", model="repeat_question_escalation")
    assert headers["x-parallel-rag-route"] == "repeat_question_escalation"
    sent = served["large"].requests[-1]
    assert sent.json()["model"] == "qwen3-32b"
    assert header(sent, "authorization") is None
    assert len(served["small"].requests) == before


def test_the_mcp_route_with_no_declared_server_forwards_without_retrieval(served):
    headers, _ = ask(served, "Summarise the design notes.", model="long_context_latency_route")
    assert headers["x-parallel-rag-retrieval"] == "off"
    assert served["large"].requests[-1].json()["messages"] == [
        {"role": "user", "content": "Summarise the design notes."}
    ]
