"""``mcp``: retrieval through a tool of an MCP server, so any MCP search tool is one more branch.

Servers are declared once, at the top level of the configuration, and retrievers name them::

    mcp_servers:
      corpus: {transport: stdio, command: python, args: [search_server.py], env: {}, cwd: .}
      remote: {transport: streamable_http, url: "https://host/mcp", headers: {Authorization: ...}}
    retrievers:
      - backend: mcp
        backend_config:
          server_name: corpus
          tool_name: search
          arguments: {query: "${user_content}", limit: "${top_k}", where: "${filters}"}

``arguments`` is a template of the tool's arguments. A string that is exactly one placeholder is
replaced by its JSON value: ``${user_content}`` (the query view, a string), ``${top_k}`` (an
integer), ``${filters}`` (an object of metadata equality filters, ``{}`` when none) and
``${decision_name}`` (the route's name, ``null`` when the run has none); a placeholder inside a
longer string is replaced by its text. A template without ``${filters}`` refuses filtered or
tenant requests: an unfiltered search could mix tenants.

The result becomes documents two ways. Structured output (``structuredContent``) is read at
``results_path`` (dotted, a list of objects) with ``id_field``, ``content_field``,
``score_field`` and ``metadata_field`` per item. Without structured output, every text content
block is one document, its id derived from its text and its score from its rank (1/rank).
``isError`` results, protocol errors, a closed connection and timeouts raise, so the branch's
``on_failure`` applies; an answer larger than ``max_response_bytes`` (omitted or 0 = 4 MiB) is
refused. Reading stops at the cap plus 64 KiB for the JSON-RPC envelope, whatever the server
sends: over streamable HTTP the body of each exchange is cut there; over stdio each message is
one line of the server's stdout, read here (not by the SDK, which holds a whole line) into at
most that many bytes, and a longer line fails the calls in flight, drops the session and
terminates the server (the next call starts a new one). Below that bound the result's size is
checked once parsed.

Every server has one long-lived session per process, opened on first use on a private event-loop
thread that owns all sessions; concurrent branches submit their calls to it and share the
session. A session whose server died is dropped, and the next call opens a new one (a stdio
server is started again). Sessions are closed when the process exits. ``check_tool`` lists the
server's tools when the graph is built: an unknown tool, or a required argument the template
does not set, is a ``SettingError`` naming the field.

The parts: ``mapping.py`` (the arguments template, the result as documents), ``transport.py``
(the capped readers), ``connection.py`` (one server's session), ``sessions.py`` (every session
of the process, on their event-loop thread), ``errors.py``; this module is the retriever.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    SCORE_KEY,
    BuildRequest,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    SettingError,
    contradicts,
)
from parallel_rag.backends.mcp.connection import MCPConnection, is_connection_lost
from parallel_rag.backends.mcp.errors import MCPTimeoutError, MCPToolError, ResponseTooLargeError
from parallel_rag.backends.mcp.mapping import render_arguments, result_documents
from parallel_rag.backends.mcp.sessions import SESSIONS
from parallel_rag.backends.mcp.settings import (
    PLACEHOLDERS,
    HeaderName,
    MCPServerConfig,
    MCPSettings,
    StdioServer,
    StreamableHTTPServer,
    declared_server,
)
from parallel_rag.backends.shared.secrets import redact, register_secrets
from pydantic import ConfigDict, Field, PrivateAttr

logger = logging.getLogger(__name__)

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "PLACEHOLDERS",
    "HeaderName",
    "MCPServerConfig",
    "MCPSettings",
    "StdioServer",
    "StreamableHTTPServer",
    "declared_server",
]


class MCPRetriever(SearchKwargsRetriever):
    """Retriever over one tool of an MCP server; usable alone in any LangChain chain."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    settings: MCPSettings
    server: StdioServer | StreamableHTTPServer
    base_dir: Path = Field(default_factory=Path.cwd)
    k: int = Field(default=10, gt=0)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    decision_name: str | None = None
    """The route this retriever serves, filled into ``${decision_name}`` unless a call names one."""
    _connection: MCPConnection | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        if isinstance(self.server, StreamableHTTPServer):
            register_secrets(self.server.headers.values())

    @property
    def retrieval_kind(self) -> RetrievalKind:
        return self.settings.retrieval_kind

    @property
    def connection(self) -> MCPConnection:
        if self._connection is None:
            self._connection = SESSIONS.connection(
                self.settings.server_name, self.server, self.base_dir
            )
        return self._connection

    def _where(self) -> str:
        return f"MCP tool '{self.settings.tool_name}' on server '{self.settings.server_name}'"

    async def _call(self, arguments: dict[str, Any]) -> Any:
        connection, timeout = self.connection, self.settings.timeout_seconds
        try:
            client = await connection.client(self.settings.cap)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            raise self._failure(error, opening=True) from None
        overflows = connection.overflows
        try:
            return await asyncio.wait_for(
                client.call_tool(self.settings.tool_name, arguments, read_timeout_seconds=timeout),
                timeout + 1,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if is_connection_lost(error):
                await connection.discard(client)
            if connection.overflows != overflows:
                raise ResponseTooLargeError(
                    f"{self._where()}: answer exceeds max_response_bytes ({self.settings.cap}): "
                    "reading stopped at the cap"
                ) from None
            raise self._failure(error) from None

    def _failure(self, error: Exception, *, opening: bool = False) -> Exception:
        """A call's failure in one bounded line naming the tool, with no secret in it."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        where, timeout = self._where(), self.settings.timeout_seconds
        if opening:
            where = f"{where}: cannot open a session"
            timeout = self.server.connect_timeout_seconds
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]  # anyio task groups wrap the one real failure
        if isinstance(error, asyncio.TimeoutError | TimeoutError) or (
            isinstance(error, MCPError) and error.error.code == REQUEST_TIMEOUT
        ):
            return MCPTimeoutError(f"{where}: no answer within {timeout:g}s")
        if isinstance(error, MCPError):
            return MCPToolError(f"{where}: {redact(error.error.message)[:300]}")
        detail = redact(str(error) or type(error).__name__).replace("\n", " ")[:300]
        return MCPToolError(f"{where}: {type(error).__name__}: {detail}")

    async def _list_tools(self) -> list[Any]:
        client = await self.connection.client(self.settings.cap)
        tools, cursor = [], None
        while True:
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _run(self, coroutine: Any) -> Any:
        budget = self.server.connect_timeout_seconds + self.settings.timeout_seconds + 2
        return SESSIONS.run(coroutine, budget, self._where())

    def check_tool(self) -> None:
        """List the server's tools: the tool must exist and every argument its input schema
        requires must be set by the template (``SettingError`` names the field). A stdio
        server that cannot be started is a setting error too; an HTTP server that does not
        answer now is only logged: each request's ``on_failure`` applies until it does."""
        try:
            tools = {tool.name: tool for tool in self._run(self._list_tools())}
        except Exception as error:
            detail = str(self._failure(error, opening=True))
            if isinstance(self.server, StdioServer):
                raise SettingError("server_name", detail) from None
            logger.warning("%s; the tool is not checked before the first request", detail)
            return
        tool = tools.get(self.settings.tool_name)
        if tool is None:
            raise SettingError(
                "tool_name",
                f"MCP server '{self.settings.server_name}' has no tool "
                f"'{self.settings.tool_name}' (it has: {sorted(tools)})",
            )
        schema = tool.input_schema or {}
        missing = [
            name for name in schema.get("required", []) if name not in self.settings.arguments
        ]
        if missing:
            raise SettingError(
                "arguments",
                f"tool '{tool.name}' requires argument(s) {missing} that the template does not set",
            )
        known = set(schema.get("properties", {}))
        unknown = sorted(set(self.settings.arguments) - known)
        if unknown and schema.get("additionalProperties") is False:
            raise SettingError(
                "arguments",
                f"tool '{tool.name}' takes no argument(s) {unknown} (it takes: {sorted(known)})",
            )

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
        decision_name: str | None = None,
    ) -> list[Document]:
        limit = k or self.k
        filters = dict(filters or {})
        if filters and not self.settings.takes_filters:
            raise ValueError(
                "the request has filters (or a tenant) but the mcp arguments template has no "
                "${filters} placeholder; refusing to run an unfiltered search"
            )
        arguments = render_arguments(
            self.settings.arguments,
            {
                "user_content": query,
                "top_k": int(limit),
                "filters": filters,
                "decision_name": decision_name or self.decision_name,
            },
        )
        result = self._run(self._call(arguments))
        where = self._where()
        if result.is_error:
            texts = [getattr(block, "text", "") for block in result.content or []]
            detail = " ".join(t for t in texts if t).strip() or "no detail"
            raise MCPToolError(f"{where} reported an error: {redact(detail)[:300]}")
        size = len(result.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))
        if size > self.settings.cap:
            raise ResponseTooLargeError(
                f"{where}: answer of {size} bytes exceeds max_response_bytes ({self.settings.cap})"
            )
        docs = result_documents(result, self.settings, where)
        kept = [d for d in docs if not contradicts(d.metadata, filters)]
        if self.score_threshold is not None:
            kept = [d for d in kept if d.metadata[SCORE_KEY] >= self.score_threshold]
        return kept[:limit]


def build_mcp(request: BuildRequest) -> MCPRetriever:
    """The retriever of an ``mcp`` entry, on the server its ``server_name`` declares under the
    configuration's ``mcp_servers``, checked against the server's tool list."""
    settings: MCPSettings = request.settings
    retriever = MCPRetriever(
        settings=settings,
        server=declared_server(settings, request.pipeline),
        base_dir=request.context.base_dir,
        k=request.k,
        score_threshold=request.entry.similarity_threshold,
        decision_name=getattr(request.pipeline, "decision_name", None),
    )
    retriever.check_tool()
    return retriever
