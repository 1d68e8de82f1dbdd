"""One MCP server's session (``MCPConnection``): opened on demand on the sessions' event loop
(``sessions.py``) over a capped transport (``transport.py``), reopened after its server died,
closed within ``CLOSE_TIMEOUT_SECONDS``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from parallel_rag.backends.mcp.settings import StdioServer, StreamableHTTPServer
from parallel_rag.backends.mcp.transport import (
    ENVELOPE_BYTES,
    capped_stdio_client,
    capped_transport,
)
from parallel_rag.backends.shared.json_http import BackendResponseError
from parallel_rag.backends.shared.secrets import redact

CLOSE_TIMEOUT_SECONDS = 5.0
logger = logging.getLogger(__name__)


def is_connection_lost(error: BaseException) -> bool:
    """A failure after which the session cannot serve another call."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(error, MCPError):
        return error.error.code == CONNECTION_CLOSED
    return not isinstance(error, asyncio.TimeoutError | TimeoutError | BackendResponseError)


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
