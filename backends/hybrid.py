"""``hybrid``: a primary backend with an optional fallback backend, and the one implementation of
"call a retriever under a timeout" and "primary, then fallback" that the graph shares.

``strategy: sequential`` (default) runs the fallback only after the primary failed or returned
nothing. ``strategy: parallel`` starts both at once and uses the primary's documents as soon as
it has any; the fallback's are used only when the primary failed or was empty. The two results
are never merged or ranked against each other.

The strategy comes in two legs, ``HybridRetriever.run_primary`` and ``run_fallback``, so the
graph can run the second leg in a node of its own (``retrieve -> fallback``): Studio draws the
path and the branch record says which backend served and why the fallback ran.
``HybridRetriever.search`` runs both legs back to back, for use outside the graph (any LCEL
chain). Every lookup (a plain branch, either leg) goes through ``start_lookup``: a
``LookupCall`` (per-call ``k``/``filters``) under a timeout, failures kept as redacted one-line
text. ``alookup`` is the same lookup for a caller on an event loop: the loop waits with the
timeout, so the lookup crosses threads once. A hybrid is dense when its primary is.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from parallel_rag.backends.base import (
    BackendSpec,
    BuildRequest,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    matches_filter,
    query_embedding,
    retrieval_kind_of,
    supports_search_kwargs,
    warm_up_each,
)
from parallel_rag.backends.secrets import describe_error
from pydantic import BaseModel, ConfigDict, Field

HybridStrategy = Literal["sequential", "parallel"]
T = TypeVar("T")

# Lookups run here so a caller can stop waiting at its timeout; a timed-out call keeps its
# thread until the backend returns (Python cannot interrupt it), so the pool is generous.
LOOKUP_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="parallel-rag-lookup")


class HybridOptions(BaseModel):
    """The hybrid's own setting; the configuration adds its legs, ``primary`` and
    ``fallback`` (each a full retriever entry of another backend), from ``BACKEND.legs``."""

    model_config = ConfigDict(extra="forbid")

    strategy: HybridStrategy = "sequential"


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


@dataclass
class HybridOutcome:
    """What a hybrid lookup returned and who served it."""

    documents: list[Document]
    served_by: str
    fallback_used: bool
    fallback_reason: str | None
    error: str | None = None


class HybridRetriever(SearchKwargsRetriever):
    """Primary retriever with an optional fallback; usable alone in any LangChain chain."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    primary: BaseRetriever
    fallback: BaseRetriever | None = None
    primary_name: str = "primary"
    fallback_name: str = "fallback"
    strategy: HybridStrategy = "sequential"
    primary_timeout_seconds: float = Field(default=30.0, gt=0)
    fallback_timeout_seconds: float = Field(default=30.0, gt=0)

    @property
    def retrieval_kind(self) -> RetrievalKind:
        return retrieval_kind_of(self.primary)

    def query_embedding(self) -> tuple[str, str] | None:
        """The primary's: the fallback may never run."""
        return query_embedding(self.primary)

    def warm_up(self) -> None:
        """Open both legs now (see ``SearchKwargsRetriever.warm_up``); a leg that cannot be
        opened does not keep the other closed, and the first error is raised after both."""
        failed = warm_up_each([("primary", self.primary), ("fallback", self.fallback)])
        if failed:
            raise next(iter(failed.values()))

    def run_primary(self, call: LookupCall[T]) -> tuple[Lookup[T], Lookup[T] | None]:
        """The first leg: the primary under its timeout. Under ``parallel`` the fallback starts
        beside it; its outcome is returned second when the primary failed or found nothing
        (the fallback's own timeout counts from its start), else it is cancelled."""
        early = None
        if self.fallback is not None and self.strategy == "parallel":
            early = start_lookup(self.fallback, call, self.fallback_timeout_seconds)
        primary = lookup(self.primary, call, self.primary_timeout_seconds)
        if early is None:
            return primary, None
        if primary.usable:
            early.cancel()  # the primary has context: the fallback's answer is not used
            return primary, None
        return primary, early.wait()

    def run_fallback(self, call: LookupCall[T]) -> Lookup[T]:
        """The second leg run now (``sequential``): the fallback under its timeout."""
        if self.fallback is None:
            raise ValueError("this hybrid has no fallback")
        return lookup(self.fallback, call, self.fallback_timeout_seconds)

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        filters: MetadataFilter | None = None,
        config: RunnableConfig | None = None,
    ) -> HybridOutcome:
        """Run the strategy; say who served and why the fallback ran."""
        call = LookupCall(query, k, filters, config)
        primary, early = self.run_primary(call)
        if primary.usable:
            return HybridOutcome(_cut(primary.result, k), self.primary_name, False, None)
        if self.fallback is None:
            return HybridOutcome([], self.primary_name, False, None, primary.error_text)
        reason = fallback_reason(primary.error_text)
        second = early if early is not None else self.run_fallback(call)
        combined = None
        if second.error is not None:
            combined = f"{reason}; fallback '{self.fallback_name}' failed: {second.error_text}"
        documents = _cut(second.result or [], k)
        return HybridOutcome(documents, self.fallback_name, True, reason, combined)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        config = RunnableConfig(callbacks=run_manager.get_child())
        outcome = self.search(query, k=k, filters=filters, config=config)
        if outcome.error is not None and not outcome.documents:
            raise RuntimeError(outcome.error)
        return outcome.documents


def _cut(documents: list[Document], k: int | None) -> list[Document]:
    return documents[:k] if k else documents


def build_hybrid(request: BuildRequest) -> HybridRetriever:
    """Both legs built through the registry (``request.build``); a leg's own
    ``timeout_seconds`` when it sets one, else the hybrid's."""
    entry, settings = request.entry, request.settings
    primary, fallback = settings.primary, settings.fallback

    def timeout(leg: Any) -> float:
        own = leg is not None and "timeout_seconds" in leg.model_fields_set
        return leg.timeout_seconds if own else entry.timeout_seconds

    return HybridRetriever(
        primary=request.build(primary),
        fallback=None if fallback is None else request.build(fallback),
        primary_name=primary.name,
        fallback_name=fallback.name if fallback is not None else "fallback",
        strategy=settings.strategy,
        primary_timeout_seconds=timeout(primary),
        fallback_timeout_seconds=timeout(fallback),
    )


BACKEND = BackendSpec(
    name="hybrid",
    settings=HybridOptions,
    factory=build_hybrid,
    kind=lambda settings: settings.primary.retrieval_kind,
    legs={"primary": True, "fallback": False},
    summary=lambda settings: {
        "primary": settings.primary.name,
        "fallback": settings.fallback.name if settings.fallback else None,
        "strategy": settings.strategy,
    },
)
