"""Admission control for the LangServe app: bounded concurrency, a bounded queue, a body cap.

Every POST (invoke, batch, stream, stream_log, stream_events: each runs the graph) takes slots
of one gate: one slot per graph run, so a batch takes as many as it has inputs (at most
``max_concurrency``; the served graph runs a batch at most that many at a time). When the gate
is full a request waits in a FIFO queue of at most ``max_queue`` requests, each for at most
``queue_timeout_seconds``; past either bound it is answered at once with 503, a ``Retry-After``
header and an OpenAI-style error body. There is never an unbounded pile-up of runs or waiters.
A body larger than ``max_body_bytes`` is refused with 413 before it is buffered. GET requests
(schemas, playground, ``/healthz``) are never held back.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from dataclasses import dataclass
from typing import Any

from parallel_rag.graph.errors import openai_error

# graph runs are CPU-bound (embeddings, BM25, extraction): more at once than about two per core
# only makes each slower, until branch timeouts fire; the queue absorbs bursts instead
DEFAULT_MAX_CONCURRENCY = max(2, 2 * (os.cpu_count() or 1))
DEFAULT_MAX_QUEUE = 64
DEFAULT_QUEUE_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
RETRY_AFTER_SECONDS = 1


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds; ``parallel-rag serve --max-concurrency N --max-queue N`` sets the first two
    (default: two graph runs per CPU core, and 64 waiting for at most 60 s)."""

    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    max_queue: int = DEFAULT_MAX_QUEUE
    queue_timeout_seconds: float = DEFAULT_QUEUE_TIMEOUT_SECONDS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency: must be at least 1, got {self.max_concurrency}")
        if self.max_queue < 0:
            raise ValueError(f"max_queue: must be 0 or more, got {self.max_queue}")
        if self.queue_timeout_seconds <= 0:
            raise ValueError("queue_timeout_seconds: must be positive")
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes: must be positive")


class GateFull(Exception):
    """No slot now, and the queue is full or the wait timed out."""


class Gate:
    """A weighted FIFO semaphore with a bounded queue (asyncio, one event loop)."""

    def __init__(self, capacity: int, max_queue: int):
        self.capacity = capacity
        self.max_queue = max_queue
        self.in_use = 0
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    @property
    def queued(self) -> int:
        return sum(1 for _, future in self._waiters if not future.done())

    async def acquire(self, weight: int, timeout: float) -> None:
        if not self.queued and self.in_use + weight <= self.capacity:
            self.in_use += weight
            return
        if self.queued >= self.max_queue:
            raise GateFull("queue full")
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((weight, future))
        try:
            await asyncio.wait_for(future, timeout)
        except BaseException as error:
            if future.done() and not future.cancelled():
                self.release(weight)  # granted just as the wait ended: give the slots back
            self._drop_done()
            if isinstance(error, TimeoutError):
                raise GateFull("timed out in the queue") from None
            raise

    def release(self, weight: int) -> None:
        self.in_use -= weight
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            weight, future = self._waiters[0]
            if future.done():  # timed out or cancelled: its slot was never taken
                self._waiters.popleft()
                continue
            if self.in_use + weight > self.capacity:
                return
            self._waiters.popleft()
            self.in_use += weight
            future.set_result(None)

    def _drop_done(self) -> None:
        self._waiters = deque(w for w in self._waiters if not w[1].done())
        self._wake()


def error_body(message: str, kind: str, code: str) -> bytes:
    """The app's OpenAI-style error body (``graph/errors.py``), as JSON bytes."""
    return json.dumps(openai_error(message, kind, code)).encode("utf-8")


class AdmissionControl:
    """ASGI middleware applying ``AdmissionLimits`` to every POST request."""

    def __init__(self, app: Any, limits: AdmissionLimits | None = None):
        self.app = app
        self.limits = limits or AdmissionLimits()
        self.gate = Gate(self.limits.max_concurrency, self.limits.max_queue)
        self.refused = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limits.max_body_bytes:
            await self._too_large(send)
            return
        body = await _read_body(receive, self.limits.max_body_bytes)
        if body is None:
            await self._too_large(send)
            return
        weight = _runs_in(scope["path"], body, self.limits.max_concurrency)
        try:
            await self.gate.acquire(weight, self.limits.queue_timeout_seconds)
        except GateFull as full:
            self.refused += 1
            await self._busy(send, str(full))
            return
        try:
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.gate.release(weight)

    async def _busy(self, send, why: str) -> None:
        limits = self.limits
        message = (
            f"server busy ({why}): {limits.max_concurrency} graph runs in progress and "
            f"{limits.max_queue} queued at most; retry after {RETRY_AFTER_SECONDS}s"
        )
        await _respond(
            send,
            503,
            error_body(message, "service_unavailable", "server_busy"),
            [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())],
        )

    async def _too_large(self, send) -> None:
        message = f"request body larger than {self.limits.max_body_bytes} bytes"
        await _respond(send, 413, error_body(message, "invalid_request_error", "body_too_large"))


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _read_body(receive, limit: int) -> bytes | None:
    """The whole request body, or None once it passes ``limit`` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away; the app sees an empty body and the disconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _runs_in(path: str, body: bytes, cap: int) -> int:
    """Graph runs a request starts: one, or a batch's input count (capped at ``cap``)."""
    if not path.rstrip("/").endswith("/batch"):
        return 1
    try:
        inputs = json.loads(body).get("inputs")
    except (ValueError, AttributeError):
        return 1  # LangServe answers the malformed body itself
    return max(1, min(len(inputs) if isinstance(inputs, list) else 1, cap))


async def _respond(send, status: int, body: bytes, headers: list | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
