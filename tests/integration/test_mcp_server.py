"""``parallel-rag mcp`` driven by the MCP SDK's client, over stdio (the client starts the
command) and over streamable HTTP (a server process on 127.0.0.1, stopped by its PID): both
tools listed with their schemas, the same results as ``parallel-rag ask --json``, and bad
arguments as tool errors naming the field."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from mcp import Client, StdioServerParameters
from servers import BIN, ServerProcess, free_port
from studio_servers import server_env, server_workspace

pytestmark = pytest.mark.integration

QUESTION = "When was Unix rewritten in C?"
START_SECONDS = 300  # the server loads the embedding model before it answers the handshake
CALL_SECONDS = 120


@pytest.fixture(scope="module")
def workspace(example_index, tmp_path_factory):
    """A copy of the example index with its config, and what ``ask --json`` answers there
    (run first: Qdrant local mode lets one process at a time open the folder)."""
    directory = tmp_path_factory.mktemp("mcp-server")
    config = server_workspace(example_index, directory, {})
    completed = subprocess.run(
        [str(BIN / "parallel-rag"), "ask", QUESTION, "--top-k", "3", "--json", "--no-progress"],
        cwd=directory,
        env=server_env(config),
        capture_output=True,
        text=True,
        timeout=START_SECONDS,
        check=True,
    )
    return config, json.loads(completed.stdout)


def stdio_client(config) -> Client:
    parameters = StdioServerParameters(
        command=str(BIN / "parallel-rag"),
        args=["mcp"],
        env=server_env(config),
        cwd=config.parent,
    )
    return Client(parameters, read_timeout_seconds=CALL_SECONDS)


@pytest.fixture
def http_url(workspace, tmp_path):
    config, _ = workspace
    port = free_port()
    server = ServerProcess(
        [str(BIN / "parallel-rag"), "mcp", "--http", "--port", str(port)],
        env=server_env(config),
        cwd=config.parent,
        log_path=tmp_path / "mcp-server.log",
    )
    try:
        server.wait_for(f"http://127.0.0.1:{port}/healthz", timeout=START_SECONDS)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.stop(grace=10)


def rounded(value):
    """``value`` with floats rounded to 6 places: a dense score may differ in its last bits
    from one process (or one embedding call) to the next."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


async def exercise(client: Client, expected: dict) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"search", "ask"}
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["required"] == ["query"]
        assert set(schema["properties"]) == {"query", "top_k", "filters", "tenant", "history"}
        assert schema["properties"]["top_k"]["maximum"] == 100
        assert tool.description

    searched = await client.call_tool("search", {"query": QUESTION, "top_k": 3})
    assert not searched.is_error
    assert rounded(searched.structured_content["documents"]) == rounded(expected["documents"])

    asked = await client.call_tool("ask", {"query": QUESTION, "top_k": 3})
    assert not asked.is_error
    answer = asked.structured_content
    for key in ("answer", "citations", "documents", "warnings"):
        assert rounded(answer[key]) == rounded(expected[key]), key
    assert "1973" in answer["answer"]

    # a follow-up with its history: resolved before retrieval, as on every surface
    history = [
        {"role": "user", "content": "Which bridge collapsed in 1940?"},
        {"role": "assistant", "content": "The Tacoma Narrows Bridge."},
    ]
    followed = await client.call_tool("ask", {"query": "When did it open?", "history": history})
    assert not followed.is_error
    top = followed.structured_content["documents"][0]["metadata"]["source"]
    assert "tacoma-narrows" in top
    lone = await client.call_tool("search", {"query": "When did it open?"})
    assert "tacoma-narrows" not in lone.structured_content["documents"][0]["metadata"]["source"]

    bad = {
        "top_k": {"query": QUESTION, "top_k": 1000},
        "query": {"query": "   "},
        "endpoint": {"query": QUESTION, "endpoint": "http://attacker.invalid"},
        "filters": {"query": QUESTION, "filters": "tenant=acme"},
        "history.0.role": {"query": QUESTION, "history": [{"role": "robot", "content": "x"}]},
    }
    for field, arguments in bad.items():
        for tool in ("search", "ask"):
            result = await client.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            text = result.content[0].text
            assert text.startswith(f"invalid request: {field}"), text


async def test_stdio(workspace):
    config, expected = workspace

    async def run() -> None:
        async with stdio_client(config) as client:
            await exercise(client, expected)

    await asyncio.wait_for(run(), START_SECONDS + 4 * CALL_SECONDS)


async def test_streamable_http(workspace, http_url):
    _, expected = workspace

    async def run() -> None:
        async with Client(http_url, read_timeout_seconds=CALL_SECONDS) as client:
            await exercise(client, expected)

    await asyncio.wait_for(run(), 4 * CALL_SECONDS)
