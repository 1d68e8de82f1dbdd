"""LangGraph Studio's server for real: ``langgraph dev`` on the repo's ``langgraph.json``, driven
with ``langgraph_sdk`` the way Studio drives it.

The server runs a config with a reranker and a rewriter over a copy of the example index. The
rewriter's chat model points at a closed loopback port with ``on_failure: warn``: the ``rewrite``
node exists and runs, fails fast, and the run goes on with the original query (and says so).
"""

from __future__ import annotations

import re

import pytest
from app_servers import running_langgraph_dev
from langgraph_sdk import get_client
from servers import free_port
from studio_servers import server_workspace

pytestmark = pytest.mark.integration

QUESTION = "Who wrote the first algorithm for the Analytical Engine?"
GRAPH_ID = "parallel_rag"  # langgraph.json
NODES = {"rewrite", "retrieve", "rerank", "fuse", "generate"}


@pytest.fixture(scope="module")
def dev_server(example_index, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("langgraph-dev")
    unreachable = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config_path = server_workspace(
        example_index,
        workdir,
        {
            "rewriter": {
                "kind": "multi_query",
                "num_queries": 2,
                "on_failure": "warn",
                "llm": {
                    "model": "offline",
                    "base_url": unreachable,
                    "timeout_seconds": 5,
                    "max_retries": 0,
                },
            },
            "reranker": {"kind": "embedding", "top_k": 5},
        },
    )
    with running_langgraph_dev(config_path, workdir) as (server, url):
        yield server, url


@pytest.fixture
async def client_and_assistant(dev_server):
    _, url = dev_server
    client = get_client(url=url)
    assistants = await client.assistants.search(graph_id=GRAPH_ID)
    assert assistants, "langgraph.json should register the parallel_rag graph"
    return client, assistants[0]["assistant_id"]


async def test_runs_wait_answers_a_question(client_and_assistant):
    client, assistant = client_and_assistant
    result = await client.runs.wait(None, assistant, input={"query": QUESTION, "top_k": 4})
    assert "Analytical Engine" in result["answer"] and result["citations"]
    assert len(result["documents"]) == 4
    cited = [result["documents"][c["number"] - 1] for c in result["citations"]]
    assert any(d["metadata"]["source"].endswith("ada-lovelace.md") for d in cited)
    assert {b["retriever"] for b in result["branches"]} == {"lexical", "dense"}
    assert all(b["rerank_ms"] is not None for b in result["branches"] if b["status"] == "ok")
    # the rewriter really ran, failed against the closed port, and the run said so
    assert any(w.startswith("rewriter failed") for w in result["warnings"])
    assert set(result["timings"]) >= NODES


async def test_runs_stream_shows_each_node_and_each_branch_as_it_finishes(client_and_assistant):
    client, assistant = client_and_assistant
    nodes, progress = [], []
    async for part in client.runs.stream(
        None, assistant, input={"query": QUESTION}, stream_mode=["updates", "custom"]
    ):
        if part.event == "updates":
            nodes.extend(part.data)
        elif part.event == "custom":
            progress.append(part.data)
    assert NODES <= set(nodes)
    assert nodes.index("rewrite") < nodes.index("fuse") < nodes.index("generate")
    assert nodes.count("retrieve") == 2 and nodes.count("rerank") == 2
    assert sorted(e["branch"] for e in progress) == ["q0:dense", "q0:lexical"]
    assert all(e["event"] == "branch_finished" and e["status"] == "ok" for e in progress)


async def test_context_knobs_apply_per_run(client_and_assistant):
    client, assistant = client_and_assistant
    knobs = {
        "retrievers": ["lexical"],
        "rerank": False,
        "rewriter": "none",
        "fusion_k": 10,
        "fusion_method": "rrf",
    }
    result = await client.runs.wait(None, assistant, input={"query": QUESTION}, context=knobs)
    assert [(b["retriever"], b["rerank_ms"]) for b in result["branches"]] == [("lexical", None)]
    assert "rewrite" not in result["timings"] and "rerank" not in result["timings"]
    assert result["documents"][0]["fused_score"] == pytest.approx(1 / 11)
    assert not any(w.startswith("rewriter failed") for w in result["warnings"])

    with pytest.raises(Exception, match=r"KnobError: retrievers: unknown retriever"):
        await client.runs.wait(
            None, assistant, input={"query": QUESTION}, context={"retrievers": ["nope"]}
        )


async def test_assistant_schemas_are_narrow_and_complete(client_and_assistant):
    client, assistant = client_and_assistant
    schemas = await client.assistants.get_schemas(assistant)
    request = schemas["input_schema"]
    # a question or a conversation: Studio's chat mode needs messages in and out
    assert set(request["properties"]) == {"query", "messages", "top_k", "filters", "tenant"}
    assert not request.get("required") and request["additionalProperties"] is False
    assert set(schemas["output_schema"]["properties"]) == {
        "messages",
        "resolution",
        "fusion",
        "answer",
        "documents",
        "queries",
        "citations",
        "branches",
        "warnings",
        "timings",
    }
    context = schemas["context_schema"]
    assert set(context["properties"]) == {
        "retrievers",
        "retriever_top_k",
        "fusion_k",
        "fusion_weights",
        "fusion_method",
        "rerank",
        "rewriter",
    }
    assert context["properties"]["rewriter"]["enum"] == ["multi_query", "decompose", "hyde", "none"]


async def test_drawn_graph_has_every_node_and_the_fan_out_edges(client_and_assistant):
    client, assistant = client_and_assistant
    drawn = await client.assistants.get_graph(assistant)
    nodes = {node["id"] for node in drawn["nodes"]}
    assert NODES <= nodes
    edges = {(edge["source"], edge["target"]) for edge in drawn["edges"]}
    assert {
        ("__start__", "rewrite"),
        ("__start__", "retrieve"),
        ("rewrite", "retrieve"),
        ("retrieve", "rerank"),
        ("rerank", "fuse"),
        ("fuse", "generate"),
        ("generate", "__end__"),
    } <= edges


async def test_the_retrieval_graph_is_served_beside_it_and_never_generates(dev_server):
    client = get_client(url=dev_server[1])
    (assistant,) = await client.assistants.search(graph_id="parallel_rag_retrieval")
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    assert set(schemas["output_schema"]["properties"]) == {
        "resolution",
        "fusion",
        "documents",
        "queries",
        "branches",
        "warnings",
        "timings",
    }
    assert "fusion_k" in schemas["context_schema"]["properties"]  # the same context form
    drawn = await client.assistants.get_graph(assistant["assistant_id"])
    assert "generate" not in {node["id"] for node in drawn["nodes"]}
    result = await client.runs.wait(
        None,
        assistant["assistant_id"],
        input={"query": QUESTION, "top_k": 3},
        context={"rewriter": "none", "retrievers": ["lexical"]},
    )
    assert "answer" not in result and len(result["documents"]) == 3
    assert [b["retriever"] for b in result["branches"]] == ["lexical"]
    assert "generate" not in result["timings"]


def test_server_log_has_no_blocking_call_errors(dev_server):
    server, _ = dev_server
    log = server.log()
    assert "/threads" in log or "runs" in log  # the runs above are in it
    blocking = re.findall(r".*(?:BlockingError|[Bb]locking call).*", log)
    assert not blocking, "\n".join(blocking[:5])


async def test_studio_chat_on_one_thread_over_two_turns(client_and_assistant):
    """What Studio's Chat mode does: messages in, on one thread; the server's own checkpointer
    keeps the conversation, and the follow-up keeps its subject."""
    client, assistant = client_and_assistant
    thread = await client.threads.create()
    first = await client.runs.wait(
        thread["thread_id"],
        assistant,
        input={"messages": [{"role": "user", "content": "Which bridge collapsed in 1940?"}]},
    )
    assert first["resolution"]["method"] == "as_written"
    # the embedding reranker's top 5 per branch: the bridge that fell is among the first three
    assert any("tacoma-narrows" in d["metadata"]["source"] for d in first["documents"][:3])
    assert "Tacoma Narrows" in first["answer"]
    second = await client.runs.wait(
        thread["thread_id"],
        assistant,
        input={"messages": [{"role": "user", "content": "When did it open?"}]},
    )
    assert second["resolution"]["method"] == "carry_over"
    assert "Tacoma Narrows" in second["resolution"]["retrieved_on"]
    assert "tacoma-narrows" in second["documents"][0]["metadata"]["source"]
    assert [q["kind"] for q in second["queries"]][-1] == "follow_up"
    state = await client.threads.get_state(thread["thread_id"])
    messages = state["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "human", "ai"]
    assert messages[-1]["content"].startswith(second["answer"])
    assert len(state["values"]["branches"]) == len(second["branches"])  # this turn's only
