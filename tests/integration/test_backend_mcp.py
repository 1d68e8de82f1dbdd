"""The ``mcp`` backend on real processes: the SDK-built search server of ``tests/support``
started over stdio (by the backend) and over streamable HTTP (on 127.0.0.1, stopped by PID),
as one branch beside BM25 and Qdrant on the ingested example corpus."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_search_server import CRASH_WORD, FLOOD_BYTES
from servers import ServerProcess, free_port
from studio_servers import REPO_ROOT, server_env, server_workspace

pytestmark = pytest.mark.integration

SERVER_SCRIPT = REPO_ROOT / "tests" / "support" / "mcp_search_server.py"
QUESTION = "When was Unix rewritten in C?"  # unix.md: tenant 'globex' on the MCP server
SECRET = "Bearer mcp-header-secret-1234"


def stdio_server(log: Path) -> dict:
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SERVER_SCRIPT)],
        "env": {"MCP_SEARCH_LOG": str(log)},
    }


def mcp_entry(tool: str = "search", **settings) -> dict:
    arguments = {"query": "${user_content}", "top_k": "${top_k}", "filters": "${filters}"}
    return {
        "name": "mcp",
        "backend": "mcp",
        "on_failure": "warn",
        "backend_config": {
            "server_name": "corpus",
            "tool_name": tool,
            "arguments": arguments if tool == "search" else {"query": "${user_content}"},
            **settings,
        },
    }


def calls(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def mcp_branch(result: dict) -> dict:
    return next(b for b in result["branches"] if b["retriever"] == "mcp")


def found_by_mcp(result: dict) -> list[dict]:
    return [d for d in result["documents"] if any(s["retriever"] == "mcp" for s in d["sources"])]


@pytest.fixture
def build(example_index, tmp_path):
    """A graph over a copy of the example index with bm25 + qdrant + the given mcp entry."""
    from parallel_rag.graph.builder import build_graph

    def make(entry: dict, server: dict):
        path = server_workspace(
            example_index,
            tmp_path / "workspace",
            {"retrievers": [entry], "mcp_servers": {"corpus": server}},
            timeout_seconds=120,
        )
        return build_graph(path)

    return make


def start_http_server(port: int, log: Path, folder: Path) -> ServerProcess:
    """The search server over streamable HTTP on 127.0.0.1:``port``, answering."""
    env = {**server_env(folder / "unused.yaml"), "MCP_SEARCH_LOG": str(log)}
    server = ServerProcess(
        [sys.executable, str(SERVER_SCRIPT), "--http", "--port", str(port)],
        env=env,
        cwd=folder,
        log_path=folder / f"http-server-{time.monotonic_ns()}.log",
    )
    server.wait_for(f"http://127.0.0.1:{port}/healthz", timeout=60)
    return server


@pytest.fixture
def http_server(tmp_path):
    """The search server over streamable HTTP on 127.0.0.1 (stopped by its PID)."""
    port, log = free_port(), tmp_path / "http-calls.jsonl"
    with start_http_server(port, log, tmp_path):
        yield f"http://127.0.0.1:{port}/mcp", log


def test_stdio_branch_answers_with_documents_it_found(build, tmp_path):
    log = tmp_path / "calls.jsonl"
    graph = build(mcp_entry(), stdio_server(log))
    result = graph.invoke({"query": QUESTION})

    branch = mcp_branch(result)
    assert branch["status"] == "ok" and branch["hits"] > 0
    assert branch["latency_ms"] > 0  # the branch record times the MCP round trip
    mcp_docs = found_by_mcp(result)
    assert any(d["id"] == "mcp:unix.md" for d in mcp_docs)
    cited = {c["id"] for c in result["citations"]}
    assert cited & {d["id"] for d in mcp_docs}, "the answer cites a document the mcp branch found"
    assert "1973" in result["answer"]
    assert len(result["branches"]) == 3 and all(b["status"] == "ok" for b in result["branches"])
    sent = calls(log)[-1]["arguments"]
    assert sent["query"] == QUESTION and sent["filters"] == {} and isinstance(sent["top_k"], int)


def test_http_branch_answers_and_sends_secret_headers(build, http_server):
    url, log = http_server
    server = {"transport": "streamable_http", "url": url, "headers": {"Authorization": SECRET}}
    graph = build(mcp_entry(), server)
    result = graph.invoke({"query": QUESTION, "top_k": 3})

    assert mcp_branch(result)["status"] == "ok"
    assert any(d["id"] == "mcp:unix.md" for d in found_by_mcp(result))
    assert calls(log)[-1]["arguments"]["query"] == QUESTION
    from parallel_rag.backends.shared.secrets import redact

    assert redact(f"echoed: {SECRET}") == "echoed: ***", "header values are registered secrets"


def test_tenant_filter_reaches_the_tool(build, tmp_path):
    log = tmp_path / "calls.jsonl"
    graph = build(mcp_entry(), stdio_server(log))
    result = graph.invoke({"query": "Which bridge opened in 1937?", "tenant": "acme"})

    assert calls(log)[-1]["arguments"]["filters"] == {"tenant": "acme"}
    assert result["documents"], "the mcp branch serves the tenant"
    for doc in result["documents"]:
        assert doc["metadata"]["tenant"] == "acme"


def test_template_without_filters_refuses_tenant_requests(build, tmp_path):
    entry = mcp_entry()
    entry["backend_config"]["arguments"] = {"query": "${user_content}"}
    graph = build(entry, stdio_server(tmp_path / "calls.jsonl"))
    result = graph.invoke({"query": QUESTION, "tenant": "acme"})

    branch = mcp_branch(result)
    assert branch["status"] == "failed" and "${filters}" in branch["error"]
    assert not calls(tmp_path / "calls.jsonl"), "no unfiltered search was sent"


def test_server_dying_mid_call_fails_the_branch_and_the_next_request_reconnects(build, tmp_path):
    log = tmp_path / "calls.jsonl"
    graph = build(mcp_entry(), stdio_server(log))

    died = graph.invoke({"query": f"unix {CRASH_WORD}"})
    branch = mcp_branch(died)
    assert branch["status"] == "failed" and "Connection closed" in branch["error"]
    assert died["answer"], "the other branches still answer (on_failure: warn)"
    assert any("mcp" in warning for warning in died["warnings"])

    again = graph.invoke({"query": QUESTION})
    assert mcp_branch(again)["status"] == "ok"
    first, second = calls(log)[-2], calls(log)[-1]
    assert first["pid"] != second["pid"], "a new server process serves the next request"


def test_http_server_dying_mid_call_then_restarted_is_reconnected(build, tmp_path):
    port, log = free_port(), tmp_path / "http-calls.jsonl"
    server = start_http_server(port, log, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        graph = build(mcp_entry(), {"transport": "streamable_http", "url": url})
        died = graph.invoke({"query": f"unix {CRASH_WORD}"})
        assert mcp_branch(died)["status"] == "failed"
        server.stop(grace=5)
        server = start_http_server(port, log, tmp_path)
        again = graph.invoke({"query": QUESTION})
        assert mcp_branch(again)["status"] == "ok"
        assert calls(log)[-2]["pid"] != calls(log)[-1]["pid"]
    finally:
        server.stop(grace=5)


@pytest.mark.parametrize(
    ("tool", "settings", "message"),
    [
        ("fail", {}, "reported an error: Error executing tool fail: the index is offline"),
        ("hang", {"timeout_seconds": 1}, "no answer within 1s"),
        ("huge", {}, "exceeds max_response_bytes (4194304)"),
        ("huge", {"max_response_bytes": 1000}, "exceeds max_response_bytes (1000)"),
        ("malformed", {}, "structuredContent.results: expected a list, got str"),
        ("flood", {}, "max_response_bytes (4194304): reading stopped at the cap"),
    ],
)
def test_tool_faults_fail_the_branch_under_warn(build, tmp_path, tool, settings, message):
    graph = build(mcp_entry(tool, **settings), stdio_server(tmp_path / "calls.jsonl"))
    result = graph.invoke({"query": QUESTION})

    branch = mcp_branch(result)
    assert branch["status"] == "failed"
    assert message in branch["error"]
    assert branch["latency_ms"] < 60_000, "the backend's limits, not the branch timeout (120 s)"
    assert "1973" in result["answer"], "bm25 and qdrant still answer"


def test_http_answer_over_the_cap_is_not_read(build, http_server):
    url, _ = http_server
    server = {"transport": "streamable_http", "url": url}
    graph = build(mcp_entry("huge", max_response_bytes=1000), server)
    branch = mcp_branch(graph.invoke({"query": QUESTION}))
    assert branch["status"] == "failed"
    assert "max_response_bytes (1000): reading stopped at the cap" in branch["error"]


def stdio_retriever(tool: str, log: Path, cap: int):
    from parallel_rag.backends.mcp.retriever import MCPRetriever
    from parallel_rag.backends.mcp.settings import MCPSettings, StdioServer

    settings = MCPSettings(
        server_name="corpus",
        tool_name=tool,
        arguments={"query": "${user_content}"},
        max_response_bytes=cap,
    )
    return MCPRetriever(settings=settings, server=StdioServer(**stdio_server(log)))


def peak_rss_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024


def reset_peak_rss() -> bool:
    """Start the peak RSS (VmHWM) over from the current RSS; False where Linux refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_group_gone(pgid: int) -> bool:
    """No process (alive or an unreaped zombie) is left in the group a stdio server leads."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return not Path(f"/proc/{pgid}").exists()
    return False


def test_stdio_answer_over_the_cap_is_not_read_and_the_next_call_starts_a_new_server(tmp_path):
    """The server writes FLOOD_BYTES on one stdout line (one message that never ends): reading
    stops at the cap, the call fails naming max_response_bytes, the server and its process
    group are gone, and the next call starts a new server on a new session."""
    from parallel_rag.backends.mcp.errors import ResponseTooLargeError
    from parallel_rag.backends.mcp.sessions import SESSIONS
    from parallel_rag.backends.mcp.transport import ENVELOPE_BYTES

    cap, log = 100_000, tmp_path / "calls.jsonl"
    search, flood = stdio_retriever("search", log, cap), stdio_retriever("flood", log, cap)
    assert search.invoke("Unix", k=1)
    connection = search.connection
    assert flood.connection is connection and connection.opened == 1
    first = calls(log)[-1]["pid"]

    measured = reset_peak_rss()
    read_before, peak_before = connection.stdout_bytes, peak_rss_bytes()
    with pytest.raises(ResponseTooLargeError) as caught:
        flood.invoke("Unix")
    assert "max_response_bytes (100000): reading stopped at the cap" in str(caught.value)
    assert calls(log)[-1] == {"tool": "flood", "arguments": {"query": "Unix"}, "pid": first}
    read = connection.stdout_bytes - read_before
    assert cap < read <= cap + ENVELOPE_BYTES + 2 * 2**16, "the cap, the envelope and a chunk"
    assert read < FLOOD_BYTES // 500
    if measured:  # the peak RSS grew by nowhere near the 200 MiB the server wrote
        assert peak_rss_bytes() - peak_before < 32 * 2**20
    assert process_group_gone(first), "the flooding server was terminated and reaped"

    assert search.invoke("Unix", k=1)
    second = calls(log)[-1]["pid"]
    assert second != first and connection.opened == 2
    SESSIONS.run(connection.close(), 30)
    assert process_group_gone(second), "closing the session stops the new server too"


def test_a_larger_cap_on_a_shared_stdio_session_is_honoured(tmp_path):
    """Retrievers with different max_response_bytes share one session: the reader holds the
    largest, each retriever's own cap is checked on the parsed result."""
    log = tmp_path / "calls.jsonl"
    small = stdio_retriever("search", log, 100_000)
    assert small.invoke("Unix", k=1)
    big = stdio_retriever("huge", log, 16_000_000)
    (doc,) = big.invoke("Unix")
    assert len(doc.page_content) == 5_000_000
    assert big.connection is small.connection and small.connection.opened == 1


def test_text_content_blocks_become_documents_with_ids_from_their_text(tmp_path):
    from parallel_rag.backends.mcp.mapping import text_id
    from parallel_rag.backends.mcp.retriever import MCPRetriever
    from parallel_rag.backends.mcp.settings import MCPSettings, StdioServer

    retriever = MCPRetriever(
        settings=MCPSettings(
            server_name="corpus",
            tool_name="search_text",
            arguments={"query": "${user_content}", "top_k": "${top_k}"},
        ),
        server=StdioServer(**stdio_server(tmp_path / "calls.jsonl")),
    )
    docs = retriever.invoke("Golden Gate Bridge", k=2)
    assert len(docs) == 2
    assert docs[0].id == text_id(docs[0].page_content)
    assert docs[0].metadata["retrieval_score"] == 1.0 and docs[1].metadata["retrieval_score"] == 0.5
    assert [d.id for d in retriever.invoke("Golden Gate Bridge", k=2)] == [d.id for d in docs]


def test_unknown_server_is_refused_when_the_config_loads(tmp_path):
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.configuration import ConfigError

    config = {
        "retrievers": [{"backend": "bm25"}, {**mcp_entry(), "name": "mcp"}],
        "mcp_servers": {"other": stdio_server(tmp_path / "calls.jsonl")},
    }
    with pytest.raises(
        ConfigError, match=r"retrievers\.mcp\.backend_config\.server_name: no MCP server .corpus."
    ):
        build_graph(config, base_dir=tmp_path)
    assert not (tmp_path / "calls.jsonl").exists()


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ({"tool_name": "no_such_tool"}, "tool_name", "has no tool 'no_such_tool'"),
        ({"arguments": {"q": "${user_content}"}}, "arguments", "requires argument(s) ['query']"),
    ],
)
def test_unknown_tool_or_uncovered_argument_is_refused_when_the_graph_is_built(
    example_index, tmp_path, settings, field, message
):
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.configuration import ConfigError

    _, base_dir, _ = example_index
    entry = mcp_entry()
    entry["backend_config"].update(settings)
    config = {
        "retrievers": [{"backend": "bm25"}, entry],
        "mcp_servers": {"corpus": stdio_server(tmp_path / "calls.jsonl")},
    }
    with pytest.raises(ConfigError) as caught:
        build_graph(config, base_dir=base_dir)
    assert f"retrievers.mcp.backend_config.{field}" in str(caught.value)
    assert message in str(caught.value)


def test_concurrent_calls_share_one_session(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from parallel_rag.backends.mcp.retriever import MCPRetriever
    from parallel_rag.backends.mcp.settings import MCPSettings, StdioServer

    log = tmp_path / "calls.jsonl"
    retriever = MCPRetriever(
        settings=MCPSettings(server_name="corpus", tool_name="search"),
        server=StdioServer(**stdio_server(log)),
    )
    questions = ["Unix", "Golden Gate Bridge", "Halley's Comet", "BM25", "ENIAC", "pulsars"] * 4
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda q: retriever.invoke(q, k=2), questions))
    assert all(results) and len(results) == len(questions)
    assert results[0][0].id == "mcp:unix.md" and results[1][0].id == "mcp:golden-gate-bridge.md"
    assert retriever.connection.opened == 1
    assert len({call["pid"] for call in calls(log)}) == 1


def test_stdio_server_exits_with_the_process(tmp_path):
    log = tmp_path / "calls.jsonl"
    script = f"""
from parallel_rag.backends.mcp.retriever import MCPRetriever
from parallel_rag.backends.mcp.settings import MCPSettings, StdioServer
server = StdioServer(**{stdio_server(log)!r})
settings = MCPSettings(server_name="corpus", tool_name="search")
retriever = MCPRetriever(settings=settings, server=server)
assert retriever.invoke("Unix", k=1)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    pid = calls(log)[-1]["pid"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the session closed and the server exited"


def test_a_route_fills_decision_name_and_reads_the_shared_mcp_servers(tmp_path):
    """A router file declares ``mcp_servers`` once; a route's plugin-shaped mcp block calls the
    tool with its own decision name in ``${decision_name}``."""
    from parallel_rag.graph import build_graph
    from parallel_rag.studio.router.configuration import parse_router, split_router_data

    log = tmp_path / "calls.jsonl"
    block = {
        "enabled": True,
        "backend": "mcp",
        "top_k": 3,
        "backend_config": {
            "server_name": "corpus",
            "tool_name": "search",
            "arguments": {"query": "${user_content}", "route": "${decision_name}"},
        },
    }
    data = {
        "mcp_servers": {"corpus": stdio_server(log)},
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "routing": {
            "decisions": [
                {"name": "docs", "model": "m", "plugins": [{"type": "rag", "configuration": block}]}
            ]
        },
    }
    router_part, pipeline_part = split_router_data(data)
    assert pipeline_part is None  # mcp_servers alone is not a top-level pipeline
    pipeline = parse_router(router_part).pipeline_for("docs")
    assert pipeline.decision_name == "docs" and set(pipeline.mcp_servers) == {"corpus"}
    result = build_graph(pipeline, base_dir=tmp_path).invoke({"query": QUESTION})
    assert mcp_branch(result)["status"] == "ok"
    assert calls(log)[-1]["arguments"]["route"] == "docs"
