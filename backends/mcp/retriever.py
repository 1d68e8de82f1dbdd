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
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
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
    scored_document,
)
from parallel_rag.backends.mcp.settings import (
    PLACEHOLDER,
    PLACEHOLDERS,
    HeaderName,
    MCPServerConfig,
    MCPSettings,
    StdioServer,
    StreamableHTTPServer,
    declared_server,
)
from parallel_rag.backends.shared.json_http import BackendResponseError, require
from parallel_rag.backends.shared.secrets import redact, register_secrets
from pydantic import ConfigDict, Field, PrivateAttr

ENVELOPE_BYTES = 64 * 1024  # JSON-RPC envelope around a capped tool result (SSE event, stdio line)
CLOSE_TIMEOUT_SECONDS = 5.0
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


class MCPToolError(RuntimeError):
    """The tool answered with ``isError``, or the call failed at the protocol level."""


class MCPTimeoutError(MCPToolError):
    """The tool did not answer within the backend's ``timeout_seconds`` (named in the message:
    the branch's own, longer timeout did not expire)."""


def render_arguments(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with placeholders filled: a whole-string placeholder becomes its JSON
    value, one inside a longer string becomes its text (strings as they are, others as JSON)."""
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template.strip())
        if whole:
            return values[whole.group(1)]

        def text(match: re.Match[str]) -> str:
            value = values[match.group(1)]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

        return PLACEHOLDER.sub(text, template)
    if isinstance(template, Mapping):
        return {key: render_arguments(item, values) for key, item in template.items()}
    if isinstance(template, list | tuple):
        return [render_arguments(item, values) for item in template]
    return template


def text_id(text: str) -> str:
    """A stable id for a document known only by its text."""
    return "mcp-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BackendResponseError(f"{where}: score {value!r} is not a number")
    return float(value)


def result_documents(result: Any, settings: MCPSettings, where: str) -> list[Document]:
    """Documents from a ``CallToolResult``: structured output through the result mapping, or
    one document per text content block."""
    structured = result.structured_content
    if structured is not None:
        items: Any = structured
        walked = f"{where}: structuredContent"
        for part in settings.results_path.split(".") if settings.results_path else []:
            items = require(items, part, walked)
            walked = f"{walked}.{part}"
        if not isinstance(items, list):
            raise BackendResponseError(f"{walked}: expected a list, got {type(items).__name__}")
        return [_item_document(item, settings, f"{walked}[{i}]") for i, item in enumerate(items)]
    blocks = list(result.content or [])
    texts = [block.text for block in blocks if getattr(block, "type", None) == "text"]
    if blocks and not texts:
        kinds = sorted({str(getattr(block, "type", "?")) for block in blocks})
        raise BackendResponseError(f"{where}: no text content (got {', '.join(kinds)})")
    return [
        scored_document(text_id(text), text, {}, 1.0 / rank)
        for rank, text in enumerate(texts, start=1)
    ]


def _item_document(item: Any, settings: MCPSettings, where: str) -> Document:
    s = settings
    doc_id = require(item, s.id_field, where)
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        raise BackendResponseError(f"{where}: field '{s.id_field}' is not a string or integer")
    content = require(item, s.content_field, where)
    if not isinstance(content, str):
        raise BackendResponseError(f"{where}: field '{s.content_field}' is not a string")
    score = _score(require(item, s.score_field, where), where) if s.score_field else 0.0
    if s.metadata_field:
        metadata = item.get(s.metadata_field) or {}
        if not isinstance(metadata, Mapping):
            raise BackendResponseError(f"{where}: field '{s.metadata_field}' is not an object")
    else:
        skip = {s.id_field, s.content_field, s.score_field}
        metadata = {key: value for key, value in item.items() if key not in skip}
    metadata = {key: value for key, value in metadata.items() if key != SCORE_KEY}
    return scored_document(str(doc_id), content, metadata, score)


# -- sessions --------------------------------------------------------------------------------


def server_key(name: str, server: StdioServer | StreamableHTTPServer) -> str:
    """One session per server name and exact settings (secrets included, hashed)."""
    data = server.model_dump(mode="json")
    if isinstance(server, StreamableHTTPServer):
        data["headers"] = {k: v.get_secret_value() for k, v in server.headers.items()}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return f"{name}:{digest}"


def _is_connection_lost(error: BaseException) -> bool:
    """A failure after which the session cannot serve another call."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(error, MCPError):
        return error.error.code == CONNECTION_CLOSED
    return not isinstance(error, asyncio.TimeoutError | TimeoutError | BackendResponseError)


class ResponseTooLargeError(BackendResponseError):
    """A tool's answer is larger than ``max_response_bytes``; read from the transport, nothing
    beyond the cap (plus the envelope allowance) was read."""


def capped_transport(cap: int, on_overflow: Any) -> Any:
    """An httpx2 transport whose answers to POSTs (one JSON-RPC exchange each: a JSON body or
    that request's event stream) stop with ``ResponseTooLargeError`` past ``cap`` bytes; the
    long-lived GET event stream of server notifications is left alone."""
    import httpx2

    class CappedStream(httpx2.AsyncByteStream):
        def __init__(self, inner: Any):
            self.inner = inner

        async def __aiter__(self):
            read = 0
            async for chunk in self.inner:
                read += len(chunk)
                if read > cap:
                    on_overflow()
                    raise ResponseTooLargeError(f"answer larger than {cap} bytes: not read")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class CappedTransport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self.inner.handle_async_request(request)
            if request.method == "POST":
                response.stream = CappedStream(response.stream)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CappedTransport()


class BoundedLines:
    """Splits a byte stream into newline-terminated lines while holding at most ``limit()``
    bytes of one line: a longer line raises ``ResponseTooLargeError`` as soon as it is seen.
    ``limit`` is read at every chunk, so a cap raised later applies to the lines after it."""

    def __init__(self, limit: Callable[[], int]):
        self.limit = limit
        self.pending = bytearray()  # the unfinished line

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes, without their newlines."""
        *complete, rest = chunk.split(b"\n")
        if complete:
            complete[0] = bytes(self.pending) + complete[0]
            self.pending = bytearray()
        self.pending += rest
        longest = max([len(self.pending), *(len(line) for line in complete)])
        if longest > self.limit():
            self.pending = bytearray()
            raise ResponseTooLargeError(f"a message longer than {self.limit()} bytes: not read")
        return complete


@asynccontextmanager
async def capped_stdio_client(
    parameters: Any,
    limit: Callable[[], int],
    on_overflow: Callable[[], None],
    on_read: Callable[[int], None] = lambda size: None,
) -> AsyncIterator[Any]:
    """The SDK's ``stdio_client`` transport with a bounded reader. The server is started,
    written to and stopped by the SDK's own helpers, as ``stdio_client`` does (command lookup,
    default environment merged under ``parameters.env``, ``cwd``, stderr inherited, its own
    process group; on exit stdin is closed, a grace period passes, then the process tree is
    killed and reaped). Its stdout is split here with ``BoundedLines``: a message (one line)
    longer than ``limit()`` stops the reading; ``on_overflow`` runs, the session sees its
    connection closed (the calls in flight fail) and the server's process tree is terminated
    at once, its remaining output left unread. ``on_read`` is told every chunk's size.

    The SDK has no hook for its reader (it buffers each line whole before parsing it), so its
    spawn and stop helpers are called by their module-private names; ``mcp`` is pinned to an
    exact version and the stdio integration tests run every one of them."""
    import anyio
    import anyio.lowlevel
    from mcp.client import stdio as sdk
    from mcp.shared.message import SessionMessage

    command = await sdk._get_executable_command(parameters.command)
    process = await sdk._create_platform_compatible_process(
        command=command,
        args=parameters.args,
        env=sdk.get_default_environment() | (parameters.env or {}),
        cwd=parameters.cwd,
    )
    # The process runs: no awaits until the task group is entered, or a cancellation in the
    # gap would leak it.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = overflowed = False
    writer_done = anyio.Event()

    def parsed(line: bytes) -> SessionMessage | Exception:
        try:
            text = line.decode(parameters.encoding, parameters.encoding_error_handler)
        except UnicodeDecodeError as error:  # reported to the session like a parse error
            return error
        return sdk._parse_line(text)

    async def stdout_reader() -> None:
        nonlocal overflowed
        assert process.stdout, "the server is spawned with pipes"
        lines = BoundedLines(limit)
        try:
            async with read_writer:
                try:
                    async for chunk in process.stdout:
                        on_read(len(chunk))
                        for line in lines.feed(chunk):
                            try:
                                await read_writer.send(parsed(line))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return  # the session is gone; only the drain below remains
                except ResponseTooLargeError:
                    overflowed = True
                    on_overflow()
                finally:
                    if not overflowed:  # lets a server blocked on a full pipe see stdin close
                        await sdk._drain_stdout(process)
            if overflowed:  # the session saw the read stream close; stop the flood now
                with anyio.CancelScope(shield=True):
                    await sdk._terminate_process_tree(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed stdout under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("reading the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        assert process.stdin, "the server is spawned with pipes"
        try:
            async with write_reader:
                async for session_message in write_reader:
                    json_text = session_message.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    data = (json_text + "\n").encode(
                        parameters.encoding, parameters.encoding_error_handler
                    )
                    await process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the connection end, not a hang
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        await sdk._aclose_all(read_stream, write_stream, read_writer, write_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


class MCPConnection:
    """One server's session, owned by a task on the sessions' event loop: the task enters the
    SDK client (transport, subprocess or HTTP client) and leaves it, in one task as anyio
    requires; any task of that loop may call tools through it meanwhile."""

    def __init__(self, name: str, server: StdioServer | StreamableHTTPServer, base_dir: Path):
        self.name = name
        self.server = server
        self.base_dir = base_dir
        self._lock: asyncio.Lock | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task | None = None
        self.opened = 0  # sessions opened so far (reconnects show here)
        self.overflows = 0  # answers cut at the cap (the session then sees its connection closed)
        self.cap = 0  # the largest max_response_bytes of the retrievers using this server
        self.stdout_bytes = 0  # bytes read from stdio servers' stdout, every session

    def _overflowed(self) -> None:
        self.overflows += 1

    def _read(self, size: int) -> None:
        self.stdout_bytes += size

    def _stdio_limit(self) -> int:
        return self.cap + ENVELOPE_BYTES

    def _stdio_parameters(self) -> Any:
        if isinstance(self.server, StdioServer):
            from mcp import StdioServerParameters

            cwd = None
            if self.server.cwd is not None:
                candidate = Path(self.server.cwd).expanduser()
                cwd = candidate if candidate.is_absolute() else (self.base_dir / candidate)
            return StdioServerParameters(
                command=self.server.command,
                args=list(self.server.args),
                env=dict(self.server.env) or None,
                cwd=cwd,
            )
        return None

    async def _own(self, ready: asyncio.Future, stop: asyncio.Event, cap: int) -> None:
        from contextlib import AsyncExitStack

        from mcp import Client

        opened = None
        try:
            async with AsyncExitStack() as stack:
                parameters = self._stdio_parameters()
                if parameters is not None:
                    target = capped_stdio_client(
                        parameters, self._stdio_limit, self._overflowed, self._read
                    )
                else:
                    import httpx2
                    from mcp.client.streamable_http import streamable_http_client

                    server = self.server
                    assert isinstance(server, StreamableHTTPServer)
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            headers={k: v.get_secret_value() for k, v in server.headers.items()},
                            timeout=httpx2.Timeout(server.connect_timeout_seconds, read=300.0),
                            transport=capped_transport(cap + ENVELOPE_BYTES, self._overflowed),
                        )
                    )
                    target = streamable_http_client(
                        server.url, http_client=http, max_sse_event_size=cap + ENVELOPE_BYTES
                    )
                client = await stack.enter_async_context(Client(target))
                self._client = opened = client
                self.opened += 1
                ready.set_result(client)
                await stop.wait()
        except BaseException as error:  # the owner's end is reported to whoever waits on it
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else ConnectionError())
            else:
                logger.debug("MCP server %s: session ended: %s", self.name, redact(repr(error)))
            if not isinstance(error, Exception):
                raise
        finally:
            if opened is not None and self._client is opened:  # a newer session stays
                self._client = None

    async def client(self, cap: int) -> Any:
        """The live session, opened (or reopened after its server died) on demand."""
        self.cap = max(self.cap, cap)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None and self._owner is not None and not self._owner.done():
                return self._client
            await self._drop()
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._owner = asyncio.create_task(self._own(ready, self._stop, cap))
            try:
                return await asyncio.wait_for(
                    asyncio.shield(ready), self.server.connect_timeout_seconds
                )
            except BaseException:
                await self._drop()
                raise

    async def _drop(self) -> None:
        owner, self._owner = self._owner, None
        if owner is None:
            return
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(owner, CLOSE_TIMEOUT_SECONDS)
        except BaseException:  # a transport that will not close in time is cancelled
            owner.cancel()
        self._client = None

    async def discard(self, client: Any) -> None:
        """Drop the session ``client`` (a failed call saw it die); a newer one stays."""
        if self._lock is None:
            return
        async with self._lock:
            if self._client is client or self._client is None:
                await self._drop()

    async def close(self) -> None:
        if self._lock is None:
            await self._drop()
            return
        async with self._lock:
            await self._drop()


class MCPSessions:
    """Every MCP session of the process, on one daemon thread running their event loop."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: dict[str, MCPConnection] = {}

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="parallel-rag-mcp", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def connection(
        self, name: str, server: StdioServer | StreamableHTTPServer, base_dir: Path
    ) -> MCPConnection:
        key = server_key(name, server)
        with self._guard:
            if key not in self._connections:
                self._connections[key] = MCPConnection(name, server, base_dir)
            return self._connections[key]

    def run(self, coroutine: Any, timeout: float, what: str = "MCP call") -> Any:
        """Run ``coroutine`` on the sessions' loop; wait at most ``timeout`` seconds."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            if not future.done():
                future.cancel()
                raise TimeoutError(f"{what}: no answer within {timeout:g}s") from None
            raise

    def close_all(self) -> None:
        """Close every session (stdio servers exit); the loop stays usable for new ones."""
        with self._guard:
            loop, connections = self._loop, list(self._connections.values())
        if loop is None or loop.is_closed() or not loop.is_running():
            return

        async def close() -> None:
            await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

        try:
            self.run(close(), CLOSE_TIMEOUT_SECONDS + 1)
        except Exception as error:  # shutting down: report, never raise
            logger.debug("closing MCP sessions: %s", error)


SESSIONS = MCPSessions()
atexit.register(SESSIONS.close_all)


# -- the retriever -----------------------------------------------------------------------------


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
            if _is_connection_lost(error):
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
