"""A real MCP server (built with the SDK's ``MCPServer``) searching the example corpus, for the
``mcp`` backend tests and the MCP round-trip bench.

Run it over stdio (the default) or streamable HTTP on 127.0.0.1::

    python tests/support/mcp_search_server.py                 # stdio
    python tests/support/mcp_search_server.py --http --port N  # http://127.0.0.1:N/mcp

Every file of ``examples/corpus`` is one document (each ``docs.jsonl`` record too), with
``source`` and a ``tenant`` (``acme`` for names starting a-m, ``globex`` otherwise) as metadata,
ranked by term overlap weighted by rarity. Tools:

- ``search(query, top_k, filters)``: structured ``{"results": [{id, content, score, metadata}]}``
  filtered by metadata equality; a query containing ``crash-now`` makes the process exit in
  the middle of the call;
- ``search_text(query, top_k)``: the same hits as plain text content blocks;
- faults: ``fail`` (an ``isError`` result), ``hang`` (sleeps an hour), ``huge`` (a 5 MB
  answer), ``malformed`` (``results`` is not a list), ``flood`` (writes ``FLOOD_BYTES`` to
  stdout with no newline, one message that never ends; over stdio only).

With ``MCP_SEARCH_LOG`` set, each call appends ``{"tool", "arguments", "pid"}`` as a JSON line
there, so a test can see what reached the server.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import TextContent
from starlette.requests import Request
from starlette.responses import PlainTextResponse

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
_STOP = {"the", "a", "an", "of", "in", "to", "is", "and", "did", "when", "what", "was", "by", "for"}
FilterValue = str | int | float | bool
CRASH_WORD = "crash-now"
FLOOD_BYTES = 200 * 2**20
WIRE_FD: int | None = None  # over stdio, the protocol's stdout (the SDK diverts fd 1 to stderr)


def terms(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOP]


def tenant_of(name: str) -> str:
    return "acme" if name[:1].lower() <= "m" else "globex"


def load_corpus(folder: Path = CORPUS) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(folder.iterdir()):
        if path.suffix in (".md", ".txt"):
            text = path.read_text(encoding="utf-8")
            docs.append({"id": f"mcp:{path.name}", "content": text, "source": path.name})
        elif path.suffix == ".jsonl":
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    record = json.loads(line)
                    source = f"{path.name}#{record['id']}"
                    content = f"{record.get('title', '')}\n\n{record['text']}".strip()
                    docs.append({"id": f"mcp:{source}", "content": content, "source": source})
    for doc in docs:
        doc["tenant"] = tenant_of(doc["source"])
        doc["terms"] = set(terms(doc["content"]))
    return docs


DOCS = load_corpus()
IDF = {
    term: math.log(1 + len(DOCS) / sum(term in d["terms"] for d in DOCS))
    for term in set().union(*(d["terms"] for d in DOCS))
}


def ranked(query: str, top_k: int, filters: dict[str, FilterValue] | None) -> list[dict[str, Any]]:
    wanted = set(terms(query))
    hits = []
    for doc in DOCS:
        metadata = {"source": doc["source"], "tenant": doc["tenant"]}
        if any(metadata.get(key) != value for key, value in (filters or {}).items()):
            continue
        score = sum(IDF.get(term, 0.0) for term in wanted & doc["terms"])
        if score > 0:
            hits.append(
                {"id": doc["id"], "content": doc["content"], "score": score, "metadata": metadata}
            )
    hits.sort(key=lambda hit: (-hit["score"], hit["id"]))
    return hits[:top_k]


def record(tool: str, arguments: dict[str, Any]) -> None:
    log = os.environ.get("MCP_SEARCH_LOG")
    if log:
        line = json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid()})
        with open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")


server = MCPServer("corpus-search", log_level="WARNING")


@server.tool()
def search(
    query: str,
    top_k: int = 5,
    filters: dict[str, FilterValue] | None = None,
    route: str | None = None,
) -> dict[str, Any]:
    """Search the example corpus; hits as structured results. ``route`` is only recorded."""
    record("search", {"query": query, "top_k": top_k, "filters": filters, "route": route})
    if CRASH_WORD in query.lower():
        os._exit(3)  # the process dies in the middle of the call
    return {"results": ranked(query, top_k, filters)}


@server.tool()
def search_text(query: str, top_k: int = 5) -> list[TextContent]:
    """Search the example corpus; each hit's text as one content block."""
    record("search_text", {"query": query, "top_k": top_k})
    return [TextContent(type="text", text=hit["content"]) for hit in ranked(query, top_k, None)]


@server.tool()
def fail(query: str) -> dict[str, Any]:
    """Always reports a tool error."""
    record("fail", {"query": query})
    raise ToolError("the index is offline")


@server.tool()
async def hang(query: str) -> dict[str, Any]:
    """Never answers in time."""
    record("hang", {"query": query})
    await anyio.sleep(3600)
    return {"results": []}


@server.tool()
def huge(query: str) -> dict[str, Any]:
    """Answers with 5 MB of text."""
    record("huge", {"query": query})
    return {"results": [{"id": "big", "content": "x" * 5_000_000, "score": 1.0}]}


@server.tool()
def flood(query: str) -> dict[str, Any]:
    """Writes ``FLOOD_BYTES`` of JSON-looking text on the protocol's stdout without a newline,
    then answers."""
    record("flood", {"query": query})
    block = b'{"jsonrpc": "2.0", "x": "' + b"x" * (2**20 - 25)
    for _ in range(FLOOD_BYTES // len(block)):
        os.write(WIRE_FD if WIRE_FD is not None else 1, block)
    return {"results": []}


@server.tool()
def malformed(query: str) -> dict[str, Any]:
    """Answers with ``results`` that is not a list."""
    record("malformed", {"query": query})
    return {"results": "not a list"}


@server.custom_route("/healthz", methods=["GET"])
async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        global WIRE_FD
        WIRE_FD = os.dup(1)
        server.run()


if __name__ == "__main__":
    main()
