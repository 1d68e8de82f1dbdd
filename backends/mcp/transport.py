"""Transports that read at most a tool answer's cap plus the JSON-RPC envelope, whatever the
server sends: over streamable HTTP the body of each exchange is cut there
(``capped_transport``); over stdio each message is one line of the server's stdout, read here
(not by the SDK, which holds a whole line) into at most that many bytes (``BoundedLines``,
``capped_stdio_client``), and a longer line fails the calls in flight, drops the session and
terminates the server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from parallel_rag.backends.mcp.errors import ResponseTooLargeError

ENVELOPE_BYTES = 64 * 1024  # JSON-RPC envelope around a capped tool result (SSE event, stdio line)
logger = logging.getLogger(__name__)


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
