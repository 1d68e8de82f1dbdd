"""The LangServe app for real: ``parallel-rag serve`` as a uvicorn process on 127.0.0.1, used with
``langserve.RemoteRunnable``, raw HTTP for the error cases, and headless Chromium for the
playground.

Its config adds a third retriever, ``missing``, whose index was never built and whose
``on_failure`` is ``block``: a request that runs it gets the 503. Every other request picks the
two good retrievers with the per-run ``retrievers`` knob, which is also how the knobs are tested.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import httpx
import pytest
from app_servers import running_serve
from langserve import RemoteRunnable
from studio_servers import server_workspace

pytestmark = pytest.mark.integration

QUESTION = "Who wrote the first algorithm for the Analytical Engine?"
GOOD = {"retrievers": ["lexical", "dense"]}
OUTPUT_KEYS = {
    "messages",
    "answer",
    "resolution",
    "documents",
    "fusion",
    "queries",
    "citations",
    "branches",
    "warnings",
    "timings",
}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def served(example_index, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("langserve")
    config_path = server_workspace(
        example_index,
        workdir,
        {
            "retrievers": [
                {
                    "name": "missing",
                    "backend": "bm25",
                    "on_failure": "block",
                    "backend_config": {"index_path": "never-ingested/bm25"},
                }
            ]
        },
    )
    with running_serve(config_path, workdir) as (_, url):
        # warm-up: the first query loads the embedding model
        body = {"input": {"query": QUESTION}, "config": {"configurable": GOOD}}
        httpx.post(f"{url}/rag/invoke", json=body, timeout=600).raise_for_status()
        yield url, workdir


@pytest.fixture
def remote(served) -> RemoteRunnable:
    url, _ = served
    return RemoteRunnable(f"{url}/rag/")


def _cited_sources(result: dict) -> list[str]:
    return [result["documents"][c["number"] - 1]["metadata"]["source"] for c in result["citations"]]


def test_remote_invoke_on_a_conversation(remote):
    """LangServe takes the conversation as OpenAI-style turns; the follow-up keeps its subject
    and the answer comes back as the conversation's next turn."""
    remote = remote.with_config(configurable=GOOD)
    result = remote.invoke(
        {
            "messages": [
                {"role": "user", "content": "Which bridge collapsed in 1940?"},
                {"role": "assistant", "content": "The Tacoma Narrows Bridge."},
                {"role": "user", "content": "When did it open?"},
            ]
        }
    )
    assert result["resolution"]["retrieved_on"] == "When did the Tacoma Narrows Bridge open?"
    assert "tacoma-narrows" in result["documents"][0]["metadata"]["source"]
    assert [m.type for m in result["messages"]] == ["human", "ai", "human", "ai"]
    assert result["messages"][-1].content.startswith(result["answer"])
    bad = {"messages": [{"role": "robot", "content": "hi"}]}
    with pytest.raises(Exception, match="messages"):
        remote.invoke(bad)


def test_remote_invoke(remote):
    result = remote.with_config(configurable=GOOD).invoke({"query": QUESTION, "top_k": 3})
    assert set(result) == OUTPUT_KEYS
    assert len(result["documents"]) == 3
    assert any(s.endswith("ada-lovelace.md") for s in _cited_sources(result))
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "lexical": "ok",
        "dense": "ok",
    }


def test_remote_batch(remote):
    results = remote.with_config(configurable=GOOD).batch(
        [{"query": QUESTION}, {"query": "What is an inverted index?"}]
    )
    assert len(results) == 2 and all(r["answer"] for r in results)
    assert any("inverted-index" in s for s in _cited_sources(results[1]))


async def test_remote_stream_and_stream_events(remote):
    knobbed = remote.with_config(configurable={**GOOD, "retriever_top_k": 4})
    # the graph streams one update per node as it finishes (LangGraph's "updates" mode)
    chunks = [chunk async for chunk in knobbed.astream({"query": QUESTION})]
    nodes = [name for chunk in chunks for name in chunk]
    assert nodes == ["retrieve", "retrieve", "fuse", "generate"]
    fused, generated = chunks[-2]["fuse"], chunks[-1]["generate"]
    assert all(b["hits"] == 4 for b in fused["branches"]) and fused["documents"]
    assert generated["answer"] and generated["citations"]

    names = set()
    async for event in knobbed.astream_events({"query": QUESTION}, version="v2"):
        if event["event"] == "on_chain_start":
            names.add(event["name"])
    assert {"retrieve", "fuse", "generate"} <= names


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": {"query": QUESTION, "bogus": 1}}, "input.bogus"),
        ({"input": {"query": "   "}}, "input.query"),
        ({"input": {"query": QUESTION, "top_k": 0}}, "input.top_k"),
        ({"input": {"query": "x" * 5000}}, "input.query"),
        ({"input": {"top_k": 3}}, "input.query"),
        ({"input": {"query": QUESTION}, "config": {"configurable": {"api_key": "sk"}}}, "api_key"),
        (
            {"input": {"query": QUESTION}, "config": {"configurable": {"base_url": "http://x"}}},
            "base_url",
        ),
        (
            {"input": {"query": QUESTION}, "config": {"configurable": {"index_path": "/etc"}}},
            "index_path",
        ),
        ({"input": {"query": QUESTION}, "config": {"configurable": {"fusion_k": -1}}}, "fusion_k"),
        (
            {"input": {"query": QUESTION}, "config": {"configurable": {"retrievers": ["nope"]}}},
            "retrievers",
        ),
        (
            {"input": {"query": QUESTION}, "config": {"configurable": {"rewriter": "hyde"}}},
            "rewriter",
        ),
    ],
)
def test_bad_input_and_non_whitelisted_config_are_422_naming_the_field(served, body, param):
    url, _ = served
    response = httpx.post(f"{url}/rag/invoke", json=body, timeout=60)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"].endswith(param) and param in error["message"]


def test_on_failure_block_is_503_with_an_openai_style_error(served):
    url, _ = served
    for endpoint, body in [
        ("invoke", {"input": {"query": QUESTION}}),
        ("batch", {"inputs": [{"query": QUESTION}]}),
    ]:
        response = httpx.post(f"{url}/rag/{endpoint}", json=body, timeout=120)
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "service_unavailable" and error["code"] == "on_failure_block"
        assert "retriever 'missing'" in error["message"] and "block" in error["message"]


def test_healthz_and_schemas(served):
    url, _ = served
    health = httpx.get(f"{url}/healthz", timeout=30).json()
    assert health == {
        "status": "ok",
        "graph": "parallel-rag",
        "retrievers": ["lexical", "dense", "missing"],
    }
    request = httpx.get(f"{url}/rag/input_schema", timeout=30).json()
    assert set(request["properties"]) == {"query", "messages", "top_k", "filters", "tenant"}
    assert not request.get("required")  # a query, or a conversation in messages
    result = httpx.get(f"{url}/rag/output_schema", timeout=30).json()
    assert set(result["properties"]) == OUTPUT_KEYS


def test_playground_page_loads_in_headless_chromium_and_shows_the_input_form(served):
    url, workdir = served
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium package is needed (make install installs it)"
    profile = workdir / "chromium-profile"
    completed = subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=20000",
            "--dump-dom",
            f"{url}/rag/playground/",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    dom = completed.stdout
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "Playground" in dom
    # the form rendered from the input schema: a field per request key, the query required
    for field in ("query", "top_k", "filters", "tenant"):
        assert f'id="#/properties/{field}-input"' in dom, field
    assert re.search(r">\s*Query\*?\s*<", dom) or "Query*" in re.sub(r"<[^>]+>", "", dom)
    # and the knobs form from the config schema
    assert 'id="#/properties/fusion_k-input"' in dom
