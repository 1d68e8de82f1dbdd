"""Every MCP session of the process (``SESSIONS``): one long-lived session per server name
and settings, on a private daemon thread running their event loop; concurrent branches submit
their calls to it and share the session. Sessions are closed when the process exits."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

from parallel_rag.backends.mcp.connection import CLOSE_TIMEOUT_SECONDS, MCPConnection
from parallel_rag.backends.mcp.settings import StdioServer, StreamableHTTPServer

logger = logging.getLogger(__name__)


def server_key(name: str, server: StdioServer | StreamableHTTPServer) -> str:
    """One session per server name and exact settings (secrets included, hashed)."""
    data = server.model_dump(mode="json")
    if isinstance(server, StreamableHTTPServer):
        data["headers"] = {k: v.get_secret_value() for k, v in server.headers.items()}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return f"{name}:{digest}"


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
