"""``parallel-rag mcp``: the configured pipeline served as MCP tools, so any MCP client (desktop
assistants, IDE agents, other agents) can search and ask it.

Two tools, their input schemas generated from the graph's request model (``RAGRequest``: the
same fields, limits and descriptions as on every other surface):

- ``search(query, top_k, filters, tenant)`` -> ``{"documents": [...]}``: the fused documents,
  each with its sources (which branch found it, at which rank, for which query view);
- ``ask(query, top_k, filters, tenant)`` -> ``{"answer", "citations", "documents", "warnings"}``.

``ask`` runs the whole graph once, exactly as ``parallel-rag ask --json`` does; ``search``
runs its retrieval graph (``build_graphs`` compiles it beside the answer graph), so it never
generates. Both return the graph's fields unchanged. A request can set nothing but these
fields (no endpoint, key, path or backend), and a bad one comes back as an MCP tool error
naming the field, as does an ``on_failure: block`` failure. Served over stdio (the default) or
streamable HTTP on 127.0.0.1 (``--http --port``, endpoint ``/mcp``, ``/healthz`` for probes).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from typing import Annotated, Any, Literal

from typing_extensions import TypedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from langgraph.graph.state import CompiledStateGraph  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp_types import CallToolResult, TextContent  # noqa: E402
from parallel_rag.backends.shared.secrets import redact  # noqa: E402
from parallel_rag.graph.builder import (  # noqa: E402
    ConfigSource,
    Served,
    build_graphs,
    graph_of,
    retrieval_graph_of,
)
from parallel_rag.graph.errors import one_line, problems  # noqa: E402
from parallel_rag.graph.state import RAGRequest, coerce_request  # noqa: E402
from parallel_rag.nodes.failure_policy import RAGError  # noqa: E402
from pydantic import Field, ValidationError  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402

TOOLS = ("search", "ask")
logger = logging.getLogger(__name__)
DEFAULT_PORT = 8765
HOST = "127.0.0.1"
SEARCH_DESCRIPTION = (
    "Search the indexed documents: the query runs through every configured retriever in "
    "parallel and the hits are fused; returns the documents with their sources."
)
ASK_DESCRIPTION = (
    "Answer a question from the indexed documents: returns the answer, the documents it "
    "cites (citations number the documents list from 1) and the documents."
)


class HistoryTurn(TypedDict):
    """One earlier turn of the conversation, as the OpenAI API writes it."""

    role: Literal["user", "assistant"]
    content: str


HISTORY_DESCRIPTION = (
    "earlier turns of the conversation, oldest first, each {role: user|assistant, content}; "
    "a follow-up question ('who founded it?') is resolved against them before retrieval"
)


def request_signature() -> inspect.Signature:
    """Keyword parameters mirroring ``RAGRequest``'s fields (types, constraints, defaults and
    descriptions), so the SDK derives each tool's input schema from the request model. A tool
    call names its question in ``query`` (required here) and may add the conversation before it
    as ``history``, in place of the request's ``messages``."""
    parameters = []
    for name, field in RAGRequest.model_fields.items():
        if name == "messages":
            continue
        annotation = Annotated[
            (field.annotation, *field.metadata, Field(description=field.description))
        ]
        default = field.default
        if name == "query":
            annotation = Annotated[str, *field.metadata, Field(description=field.description)]
            default = inspect.Parameter.empty
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )
    history = Annotated[list[HistoryTurn] | None, Field(description=HISTORY_DESCRIPTION)]
    parameters.append(
        inspect.Parameter(
            "history", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=history
        )
    )
    return inspect.Signature(parameters, return_annotation=dict[str, Any])


def validated_request(arguments: dict[str, Any]) -> dict[str, Any]:
    """The request as the graph takes it; a bad field is a tool error naming it. ``history``
    and ``query`` become the conversation (``messages``), the question last."""
    fields = {k: v for k, v in arguments.items() if v is not None}
    history = fields.pop("history", None)
    if history is not None:
        if not isinstance(history, list):
            raise ToolError("invalid request: history: expected a list of {role, content} turns")
        if "query" not in fields:
            raise ToolError("invalid request: query: Field required")
        fields["messages"] = [*history, {"role": "user", "content": fields.pop("query")}]
    try:
        request = coerce_request(fields)
    except ValidationError as error:
        problem = one_line(problems(error, arguments)).replace("messages.", "history.")
        raise ToolError(f"invalid request: {problem}") from None
    return request


def run_graph(graph: CompiledStateGraph, arguments: dict[str, Any]) -> dict[str, Any]:
    request = validated_request(arguments)
    try:
        return graph.invoke(request)
    except RAGError as error:  # on_failure: block, or a request the pipeline cannot serve
        raise ToolError(redact(str(error))) from None
    except Exception as error:  # never a traceback or a secret to the client; the log has it
        logger.exception("MCP tool call failed")
        raise ToolError(f"{type(error).__name__}: {redact(str(error))}"[:500]) from None


def _tool(function: Any, name: str) -> Any:
    function.__name__ = name
    function.__signature__ = request_signature()
    return function


def request_error(arguments: Any) -> str | None:
    """Why ``arguments`` is not a valid request, naming the field (None when it is)."""
    try:
        validated_request(arguments if isinstance(arguments, dict) else {})
    except ToolError as error:
        return str(error)
    return None


async def validate_arguments(ctx: Any, call_next: Any) -> Any:
    """Server middleware: ``search``/``ask`` arguments are checked against the request model
    before the SDK sees them, so every bad call (an unknown field included, which the SDK alone
    would drop silently) is one tool error naming the field."""
    params = ctx.params if isinstance(ctx.params, dict) else {}
    if ctx.method == "tools/call" and params.get("name") in TOOLS:
        problem = request_error(params.get("arguments") or {})
        if problem is not None:
            return CallToolResult(content=[TextContent(type="text", text=problem)], is_error=True)
    return await call_next(ctx)


def build_server(graph: Served, *, name: str = "parallel-rag") -> MCPServer:
    """An ``MCPServer`` with the ``search`` (its retrieval graph) and ``ask`` tools over
    ``graph``."""
    server = MCPServer(name, log_level="WARNING", middleware=[validate_arguments])
    retrieval = retrieval_graph_of(graph)  # a bare compiled graph: itself
    graph = graph_of(graph)

    def search(**arguments: Any) -> dict[str, Any]:
        result = run_graph(retrieval, arguments)
        return {"documents": result["documents"]}

    def ask(**arguments: Any) -> dict[str, Any]:
        result = run_graph(graph, arguments)
        return {key: result[key] for key in ("answer", "citations", "documents", "warnings")}

    server.add_tool(_tool(search, "search"), description=SEARCH_DESCRIPTION)
    server.add_tool(_tool(ask, "ask"), description=ASK_DESCRIPTION)

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return server


def serve(
    config: ConfigSource = None,
    *,
    base_dir: str | os.PathLike | None = None,
    http: bool = False,
    port: int = DEFAULT_PORT,
    host: str = HOST,
) -> None:
    """Build the graph (loading what the first request would), then serve it until stopped.
    ``base_dir``: where a ``PipelineConfig``'s relative paths start (a file's own folder)."""
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the stdio transport: keep it clean
        graphs = build_graphs(config, base_dir=base_dir)
        graphs.warm_up()  # the model and the stores load now, not in the first call's timeouts
    server = build_server(graphs)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run()
