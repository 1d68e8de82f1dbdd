"""The ``retrieve`` node: one task per (query view, retriever), sent by the fan-out.

A branch never raises into its siblings: an error, a timeout or an empty result is recorded in
its ``BranchResult``. Only ``on_failure: block`` stops the request. Sync retrievers run off the
event loop (LangChain's ``ainvoke`` runs them in an executor), so branches overlap. Each branch
reports itself as it finishes on LangGraph's custom stream (``stream_mode="custom"``).

A hybrid branch (``FallbackPlan``) whose primary failed or came back empty does not finish here:
it is sent on to the ``fallback`` node (``nodes/fallback.py``), a real edge of the graph. With
``strategy: parallel`` the fallback lookup starts here beside the primary, and its outcome
travels with the ``Send`` so the fallback node only records it.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.config import get_stream_writer
from langgraph.types import Command, Send
from parallel_rag.backends.base import (
    SCORE_KEY,
    RetrievalKind,
    matches_filter,
    supports_search_kwargs,
)
from parallel_rag.backends.hybrid import fallback_reason
from parallel_rag.backends.secrets import redact
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.records import BranchHit, BranchResult, FailurePolicy, QueryView, branch_key

MAX_ERROR_CHARS = 500
_SYNC_TIMEOUT_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="parallel-rag-branch")


@dataclass(frozen=True)
class FallbackPlan:
    """A hybrid branch's fallback backend, run by the ``fallback`` node when the primary failed
    or returned nothing; ``parallel`` starts it beside the primary."""

    name: str
    retriever: BaseRetriever
    strategy: Literal["sequential", "parallel"] = "sequential"
    timeout_seconds: float = 30.0


@dataclass(frozen=True)
class RetrievalBranch:
    """A retriever as the graph runs it: the object plus its branch settings. For a hybrid,
    ``retriever`` is the primary, ``served_by`` its name and ``fallback`` the fallback."""

    name: str
    index: int
    retriever: BaseRetriever
    kind: RetrievalKind
    top_k: int | None = None
    on_failure: FailurePolicy = "warn"
    timeout_seconds: float = 30.0
    served_by: str | None = None
    fallback: FallbackPlan | None = None


class RetrieveTask(TypedDict):
    """The payload of one ``Send("retrieve", ...)``."""

    view: QueryView
    retriever: str
    query: str
    top_k: int
    filters: dict[str, Any]
    limit: NotRequired[int]  # per-run candidate count (knob); else the branch's top_k
    rerank: NotRequired[bool]  # False: this run skips the configured reranker


class PrefetchedFallback(TypedDict):
    """A fallback outcome obtained beside the primary (``strategy: parallel``)."""

    hits: list[BranchHit]
    error: str | None
    latency_ms: float


class FallbackTask(TypedDict):
    """The payload of one ``Send("fallback", ...)``: the branch's task and why it falls back."""

    task: RetrieveTask
    reason: str
    primary_error: str | None
    elapsed_ms: float
    prefetched: NotRequired[PrefetchedFallback]


def search_kwargs(retriever: BaseRetriever, limit: int, filters: Mapping[str, Any] | None):
    """Per-call ``k``/``filters`` for our backends; foreign retrievers are post-filtered."""
    if supports_search_kwargs(retriever):
        return {"k": limit, "filters": dict(filters or {}) or None}
    return {}


def failure_message(error: BaseException, timeout_seconds: float) -> str:
    if isinstance(error, TimeoutError | FutureTimeout):
        return f"timed out after {timeout_seconds:g}s"
    return describe_error(error)


def _timed_invoke(retriever: BaseRetriever, text: str, config: RunnableConfig, kwargs: dict):
    started = time.perf_counter()
    docs = retriever.invoke(text, config, **kwargs)
    return docs, (time.perf_counter() - started) * 1000


async def _timed_ainvoke(retriever: BaseRetriever, text: str, config: RunnableConfig, kwargs):
    started = time.perf_counter()
    docs = await retriever.ainvoke(text, config, **kwargs)
    return docs, (time.perf_counter() - started) * 1000


def content_id(content: str) -> str:
    """Stable id for documents whose backend gives none: a hash of the content."""
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()[:32]


def documents_to_hits(
    docs: Sequence[Document], *, limit: int, filters: Mapping[str, Any] | None, post_filter: bool
) -> list[BranchHit]:
    """Ranked hits from retriever output: score out of metadata, filter, de-duplicate, cut."""
    hits: list[BranchHit] = []
    seen: set[str] = set()
    for doc in docs:
        metadata = dict(doc.metadata)
        score = metadata.pop(SCORE_KEY, None)
        if post_filter and not matches_filter(metadata, filters):
            continue
        doc_id = str(doc.id) if doc.id else content_id(doc.page_content)
        if doc_id in seen:
            continue
        seen.add(doc_id)
        hits.append(
            BranchHit(
                id=doc_id,
                content=doc.page_content,
                metadata=metadata,
                rank=len(hits) + 1,
                score=None if score is None else float(score),
            )
        )
        if len(hits) >= limit:
            break
    return hits


def describe_error(error: BaseException) -> str:
    """A bounded, single-line description of a failure, every known secret redacted (a hostile
    or careless service may echo the key it was sent; this text reaches results and logs)."""
    text = redact(str(error)).strip().replace("\n", " ")
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text[:MAX_ERROR_CHARS]


def report_progress(result: BranchResult) -> None:
    """Tell a ``stream_mode="custom"`` consumer (CLI, Studio) that this branch has finished."""
    try:
        writer = get_stream_writer()
    except (RuntimeError, KeyError):  # called outside a graph run
        return
    writer(
        {
            "event": "branch_finished",
            "branch": result["branch"],
            "retriever": result["retriever"],
            "view_kind": result["view_kind"],
            "status": result["status"],
            "hits": len(result["hits"]),
            "latency_ms": round(result["latency_ms"], 1),
            "error": result["error"],
        }
    )


class RetrieveNode:
    """Runs one branch; sync and async forms share everything but the call itself."""

    def __init__(self, branches: Mapping[str, RetrievalBranch], *, rerank: bool):
        self.branches = dict(branches)
        self.rerank = rerank

    def _call_args(self, task: RetrieveTask) -> tuple[RetrievalBranch, int, dict[str, Any]]:
        branch = self.branches[task["retriever"]]
        limit = task.get("limit") or branch.top_k or 2 * task["top_k"]
        kwargs: dict[str, Any] = {}
        if supports_search_kwargs(branch.retriever):
            kwargs = {"k": limit, "filters": task["filters"] or None}
        return branch, limit, kwargs

    def outcome(
        self,
        task: RetrieveTask,
        retriever: BaseRetriever,
        limit: int,
        docs: Sequence[Document] | None,
        error: BaseException | None,
    ) -> tuple[list[BranchHit], BaseException | None]:
        """Ranked hits of one lookup, or the error that stopped it."""
        hits: list[BranchHit] = []
        if error is None:
            try:
                hits = documents_to_hits(
                    docs or [],
                    limit=limit,
                    filters=task["filters"],
                    post_filter=not supports_search_kwargs(retriever),
                )
            except Exception as exc:  # malformed documents are a backend failure too
                error = exc
        return hits, error

    def _finish(
        self,
        task: RetrieveTask,
        branch: RetrievalBranch,
        limit: int,
        started: float,
        docs: Sequence[Document] | None,
        error: BaseException | None,
        prefetched: PrefetchedFallback | None = None,
    ) -> dict[str, Any] | Command:
        hits, error = self.outcome(task, branch.retriever, limit, docs, error)
        return self._conclude(task, branch, started, hits, error, prefetched)

    def _conclude(
        self,
        task: RetrieveTask,
        branch: RetrievalBranch,
        started: float,
        hits: list[BranchHit],
        error: BaseException | None,
        prefetched: PrefetchedFallback | None = None,
    ) -> dict[str, Any] | Command:
        view = task["view"]
        message = None
        if branch.fallback is not None and (error is not None or not hits):
            return self._to_fallback(task, branch, started, error, prefetched)
        if error is not None:
            message = failure_message(error, branch.timeout_seconds)
            if branch.on_failure == "block":
                raise BlockedError(f"retriever '{branch.name}'", message) from error
        result = BranchResult(
            branch=branch_key(view["index"], branch.name),
            view_index=view["index"],
            view=view["text"],
            view_kind=view["kind"],
            retriever=branch.name,
            retriever_index=branch.index,
            status="failed" if error is not None else ("ok" if hits else "empty"),
            hits=hits,
            latency_ms=(time.perf_counter() - started) * 1000,
            error=message,
            warning=(
                f"retriever '{branch.name}' failed on {view['kind']} view {view['index']}: "
                f"{message}"
                if error is not None and branch.on_failure == "warn"
                else None
            ),
        )
        if branch.served_by is not None:
            result.update(served_by=branch.served_by, fallback_used=False, fallback_reason=None)
        return self.emit(task, result, {"retrieve": result["latency_ms"]})

    def _to_fallback(
        self,
        task: RetrieveTask,
        branch: RetrievalBranch,
        started: float,
        error: BaseException | None,
        prefetched: PrefetchedFallback | None,
    ) -> Command:
        """Hand a hybrid branch whose primary failed or was empty to the ``fallback`` node."""
        primary_error = None if error is None else failure_message(error, branch.timeout_seconds)
        elapsed = (time.perf_counter() - started) * 1000
        payload = FallbackTask(
            task=task,
            reason=fallback_reason(primary_error),
            primary_error=primary_error,
            elapsed_ms=elapsed,
        )
        if prefetched is not None:
            payload["prefetched"] = prefetched
        return Command(update={"timings": {"retrieve": elapsed}}, goto=Send("fallback", payload))

    def emit(
        self, task: RetrieveTask, result: BranchResult, timings: dict[str, float]
    ) -> dict[str, Any] | Command:
        """A finished branch goes to its rerank task, or straight to fusion."""
        report_progress(result)
        if self.rerank and task.get("rerank") is False:
            return Command(update={"branch_results": [result], "timings": timings}, goto="fuse")
        if self.rerank:
            return Command(
                update={"timings": timings},
                goto=Send("rerank", {"result": result, "query": task["query"]}),
            )
        return {"branch_results": [result], "timings": timings}

    def invoke(self, task: RetrieveTask, config: RunnableConfig) -> dict[str, Any] | Command:
        branch, limit, kwargs = self._call_args(task)
        started = time.perf_counter()
        docs, error = None, None
        plan = branch.fallback
        early = None
        if plan is not None and plan.strategy == "parallel":
            early = _SYNC_TIMEOUT_POOL.submit(
                _timed_invoke,
                plan.retriever,
                task["view"]["text"],
                config,
                search_kwargs(plan.retriever, limit, task["filters"]),
            )
        future = _SYNC_TIMEOUT_POOL.submit(
            branch.retriever.invoke, task["view"]["text"], config, **kwargs
        )
        try:
            docs = future.result(timeout=branch.timeout_seconds)
        except Exception as exc:
            future.cancel()
            error = exc
        if early is None:
            return self._finish(task, branch, limit, started, docs, error)
        hits, error = self.outcome(task, branch.retriever, limit, docs, error)
        prefetched = None
        if error is None and hits:
            early.cancel()  # the primary has context: the fallback's answer is not used
        else:
            fallback_docs, fallback_error, latency = None, None, 0.0
            try:
                remaining = plan.timeout_seconds - (time.perf_counter() - started)
                fallback_docs, latency = early.result(timeout=max(remaining, 0.001))
            except Exception as exc:
                early.cancel()
                fallback_error = exc
            prefetched = self._prefetched(task, plan, limit, fallback_docs, fallback_error, latency)
        return self._conclude(task, branch, started, hits, error, prefetched)

    def _prefetched(
        self,
        task: RetrieveTask,
        plan: FallbackPlan,
        limit: int,
        docs: Sequence[Document] | None,
        error: BaseException | None,
        latency_ms: float,
    ) -> PrefetchedFallback:
        hits, error = self.outcome(task, plan.retriever, limit, docs, error)
        message = None if error is None else failure_message(error, plan.timeout_seconds)
        return PrefetchedFallback(hits=hits, error=message, latency_ms=latency_ms)

    async def ainvoke(self, task: RetrieveTask, config: RunnableConfig) -> dict[str, Any] | Command:
        branch, limit, kwargs = self._call_args(task)
        started = time.perf_counter()
        docs, error = None, None
        plan = branch.fallback
        early = None
        if plan is not None and plan.strategy == "parallel":
            early = asyncio.ensure_future(
                _timed_ainvoke(
                    plan.retriever,
                    task["view"]["text"],
                    config,
                    search_kwargs(plan.retriever, limit, task["filters"]),
                )
            )
        try:
            docs = await asyncio.wait_for(
                branch.retriever.ainvoke(task["view"]["text"], config, **kwargs),
                timeout=branch.timeout_seconds,
            )
        except Exception as exc:
            error = exc
        if early is None:
            return self._finish(task, branch, limit, started, docs, error)
        hits, error = self.outcome(task, branch.retriever, limit, docs, error)
        prefetched = None
        if error is None and hits:
            early.cancel()  # the primary has context: the fallback's answer is not used
        else:
            fallback_docs, fallback_error, latency = None, None, 0.0
            try:
                remaining = plan.timeout_seconds - (time.perf_counter() - started)
                fallback_docs, latency = await asyncio.wait_for(
                    early, timeout=max(remaining, 0.001)
                )
            except Exception as exc:
                fallback_error = exc
            prefetched = self._prefetched(task, plan, limit, fallback_docs, fallback_error, latency)
        return self._conclude(task, branch, started, hits, error, prefetched)

    def as_runnable(self) -> RunnableLambda:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="retrieve")
