"""The one implementation of "call a retriever under a timeout", which the graph's branches and
the ``hybrid`` backend share, and the shape of a retriever with a fallback leg.

Every lookup (a plain branch, either leg of a hybrid) goes through ``start_lookup``: a
``LookupCall`` (per-call ``k``/``filters``) under a timeout, failures kept as redacted one-line
text. ``alookup`` is the same lookup for a caller on an event loop: the loop waits with the
timeout, so the lookup crosses threads once. A retriever with legs (``FallbackRetriever``:
the ``hybrid`` backend's) runs them as two steps, ``run_primary`` and ``run_fallback``, so the
graph can run the second in a node of its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from parallel_rag.backends.base import MetadataFilter, matches_filter, supports_search_kwargs
from parallel_rag.backends.shared.secrets import describe_error

T = TypeVar("T")

# Lookups run here so a caller can stop waiting at its timeout; a timed-out call keeps its
# thread until the backend returns (Python cannot interrupt it), so the pool is generous.
LOOKUP_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="parallel-rag-lookup")


def fallback_reason(error: str | None) -> str:
    """Why the fallback ran, for the branch record."""
    return f"primary failed: {error}" if error else "primary returned no results"


@dataclass(frozen=True)
class LookupCall(Generic[T]):
    """One lookup's arguments: the query, per-call ``k``/``filters``, the caller's ``config``
    (callbacks, tracing) and ``convert``, which shapes the documents inside the call, so
    malformed documents count as the backend's failure and "empty" means nothing usable."""

    query: str
    k: int | None = None
    filters: MetadataFilter | None = None
    config: RunnableConfig | None = None
    convert: Callable[[list[Document]], T] = list


def search_documents(retriever: BaseRetriever, call: LookupCall) -> list[Document]:
    """One lookup with per-call ``k``/``filters``: our backends take them; a foreign retriever
    gets the bare query and its documents are filtered here (the caller cuts to ``k``)."""
    if supports_search_kwargs(retriever):
        filters = dict(call.filters or {}) or None
        return retriever.invoke(call.query, call.config, k=call.k, filters=filters)
    documents = retriever.invoke(call.query, call.config)
    return [d for d in documents if matches_filter(d.metadata, call.filters)]


def failure_text(error: BaseException, timeout_seconds: float) -> str:
    """A failed lookup as one bounded, redacted line; a timeout says how long was waited."""
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout_seconds:g}s"
    return describe_error(error)


@dataclass
class Lookup(Generic[T]):
    """What one lookup gave: its documents (as ``convert`` shaped them) or the error that stopped
    it, and how long the call took."""

    result: T | None
    error: BaseException | None
    latency_ms: float
    timeout_seconds: float

    @property
    def usable(self) -> bool:
        """It succeeded and found something: no fallback is needed."""
        return self.error is None and bool(self.result)

    @property
    def error_text(self) -> str | None:
        return None if self.error is None else failure_text(self.error, self.timeout_seconds)


class PendingLookup(Generic[T]):
    """A lookup running in ``LOOKUP_POOL``; ``wait`` collects it by its deadline."""

    def __init__(self, future: Future, timeout_seconds: float):
        self.future = future
        self.timeout_seconds = timeout_seconds
        self.started = time.perf_counter()

    def wait(self) -> Lookup[T]:
        """The outcome, or a timeout once ``timeout_seconds`` have passed since the start."""
        remaining = self.timeout_seconds - (time.perf_counter() - self.started)
        try:
            result, latency_ms = self.future.result(timeout=max(remaining, 0.001))
        except Exception as error:  # noqa: BLE001 - every backend failure is an outcome
            self.future.cancel()
            latency_ms = (time.perf_counter() - self.started) * 1000
            return Lookup(None, error, latency_ms, self.timeout_seconds)
        return Lookup(result, None, latency_ms, self.timeout_seconds)

    def cancel(self) -> None:
        self.future.cancel()


def _timed_call(retriever: BaseRetriever, call: LookupCall) -> tuple[Any, float]:
    started = time.perf_counter()
    result = call.convert(search_documents(retriever, call))
    return result, (time.perf_counter() - started) * 1000


def start_lookup(
    retriever: BaseRetriever, call: LookupCall[T], timeout_seconds: float
) -> PendingLookup[T]:
    """Start ``search_documents`` in the pool, in a copy of the caller's context (its tracing
    and run context go along)."""
    context = contextvars.copy_context()
    future = LOOKUP_POOL.submit(context.run, _timed_call, retriever, call)
    return PendingLookup(future, timeout_seconds)


def lookup(retriever: BaseRetriever, call: LookupCall[T], timeout_seconds: float) -> Lookup[T]:
    """``start_lookup`` and wait for it: one lookup under its timeout (never raises)."""
    return start_lookup(retriever, call, timeout_seconds).wait()


async def alookup(
    retriever: BaseRetriever, call: LookupCall[T], timeout_seconds: float
) -> Lookup[T]:
    """``lookup`` for a caller on an event loop: the lookup runs in ``LOOKUP_POOL`` (a thread
    of its own, so a hung backend holds no loop and no sibling) and the loop stops waiting at
    ``timeout_seconds``; same outcome, same failure text (never raises)."""
    pending = start_lookup(retriever, call, timeout_seconds)
    try:
        result, latency_ms = await asyncio.wait_for(
            asyncio.wrap_future(pending.future), timeout_seconds
        )
    except Exception as error:  # noqa: BLE001 - every backend failure is an outcome
        pending.cancel()
        latency_ms = (time.perf_counter() - pending.started) * 1000
        return Lookup(None, error, latency_ms, timeout_seconds)
    return Lookup(result, None, latency_ms, timeout_seconds)


@runtime_checkable
class FallbackRetriever(Protocol):
    """A retriever with a primary and a fallback leg, which the graph runs as two steps: the
    primary in the branch's ``retrieve`` node, the fallback (when the primary failed or found
    nothing) in the ``fallback`` node. The ``hybrid`` backend's retriever is one."""

    primary_name: str
    fallback_name: str
    fallback: BaseRetriever | None

    def run_primary(self, call: LookupCall[T]) -> tuple[Lookup[T], Lookup[T] | None]:
        """The primary under its timeout, and the fallback's outcome when it ran beside it."""

    def run_fallback(self, call: LookupCall[T]) -> Lookup[T]:
        """The fallback under its timeout."""
