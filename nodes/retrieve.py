"""The ``retrieve`` node: one task per (query view, retriever), sent by the fan-out.

A branch never raises into its siblings: an error, a timeout or an empty result is recorded in
its ``BranchResult``. Only ``on_failure: block`` stops the request. Each lookup runs under the
branch's timeout (``backends.hybrid.start_lookup``). Under ``invoke``/``stream`` LangGraph runs
each task in its own thread and the lookup waits there; under ``ainvoke``/``astream`` the node
is a coroutine (``RetrieveNode.ainvoke``): the lookup is the only thread hop and the event loop
enforces the timeout. Each branch reports itself as it finishes on LangGraph's custom stream
(``stream_mode="custom"``).

A ``hybrid`` branch runs its primary here (``HybridRetriever.run_primary``, which under
``strategy: parallel`` also starts the fallback beside it). When the primary failed or came back
empty the branch does not finish here: it is sent on to the ``fallback`` node
(``nodes/fallback.py``), a real edge of the graph, with the prefetched fallback outcome, if
any, in the ``Send``.

The run's knobs come from the injected ``runtime`` (``nodes/knobs.py``), not the payload:
``retriever_top_k`` sets the candidate count and ``rerank: false`` sends the branch straight
to ``fuse``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NotRequired, TypedDict

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from parallel_rag.backends.base import SCORE_KEY, RetrievalKind, matches_filter
from parallel_rag.backends.shared.lookups import (
    FallbackRetriever,
    Lookup,
    LookupCall,
    alookup,
    fallback_reason,
    lookup,
)
from parallel_rag.nodes.failure_policy import FailurePolicy, apply_failure_policy
from parallel_rag.nodes.knobs import knob
from parallel_rag.nodes.records import BranchHit, BranchResult, QueryView, branch_key


@dataclass(frozen=True)
class RetrievalBranch:
    """A retriever as the graph runs it: the object plus its branch settings. A retriever with
    legs (``FallbackRetriever``: a ``hybrid`` backend's) runs its primary in ``retrieve`` and
    its fallback in ``fallback``, each under its own timeout (``timeout_seconds`` is then
    unused)."""

    name: str
    index: int
    retriever: BaseRetriever
    kind: RetrievalKind
    top_k: int | None = None
    on_failure: FailurePolicy = "warn"
    timeout_seconds: float = 30.0

    @property
    def hybrid(self) -> FallbackRetriever | None:
        return self.retriever if isinstance(self.retriever, FallbackRetriever) else None

    @property
    def falls_back(self) -> bool:
        """The branch can be sent on to the ``fallback`` node."""
        return self.hybrid is not None and self.hybrid.fallback is not None


class RetrieveTask(TypedDict):
    """The payload of one ``Send("retrieve", ...)``."""

    view: QueryView
    retriever: str
    query: str
    top_k: int
    filters: dict[str, Any]


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


def content_id(content: str) -> str:
    """Stable id for documents whose backend gives none: a hash of the content."""
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()[:32]


def documents_to_hits(
    docs: Sequence[Document],
    *,
    limit: int,
    filters: Mapping[str, Any] | None = None,
    post_filter: bool = False,
) -> list[BranchHit]:
    """Ranked hits from retriever output: score out of metadata, (post-)filter, de-duplicate,
    cut to ``limit``."""
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
    """Runs one branch (``invoke``, the graph's node); the ``fallback`` node finishes hybrid
    branches with the same ``lookup_call``, ``branch_result`` and ``emit``."""

    def __init__(self, branches: Mapping[str, RetrievalBranch], *, rerank: bool):
        self.branches = dict(branches)
        self.rerank = rerank

    def lookup_call(
        self, task: RetrieveTask, config: RunnableConfig, runtime: Runtime[Any] | None = None
    ) -> LookupCall[list[BranchHit]]:
        """The task's lookup: its view, the candidate count (the run's ``retriever_top_k``, else
        the branch's ``top_k``, else twice the request's) and the request's filters, the
        documents converted to ranked hits."""
        branch = self.branches[task["retriever"]]
        limit = knob(runtime, "retriever_top_k") or branch.top_k or 2 * task["top_k"]
        to_hits = partial(documents_to_hits, limit=limit)
        return LookupCall(task["view"]["text"], limit, task["filters"] or None, config, to_hits)

    def invoke(
        self, task: RetrieveTask, config: RunnableConfig, runtime: Runtime[Any] | None = None
    ) -> dict[str, Any] | Command:
        branch = self.branches[task["retriever"]]
        started = time.perf_counter()
        call, hybrid = self.lookup_call(task, config, runtime), branch.hybrid
        if hybrid is None:
            outcome = lookup(branch.retriever, call, branch.timeout_seconds)
        else:
            outcome, prefetched = hybrid.run_primary(call)
            if branch.falls_back and not outcome.usable:
                return self._to_fallback(task, started, outcome, prefetched)
        return self._finish(task, started, outcome, hybrid, runtime)

    async def ainvoke(
        self, task: RetrieveTask, config: RunnableConfig, runtime: Runtime[Any] | None = None
    ) -> dict[str, Any] | Command:
        """``invoke`` on the event loop: a plain branch awaits its lookup (one thread hop, the
        timeout kept by the loop); a hybrid branch, whose legs wait on each other, runs
        ``invoke`` in a worker thread as LangGraph would run a sync node."""
        branch = self.branches[task["retriever"]]
        if branch.hybrid is not None:
            return await run_in_executor(config, self.invoke, task, config, runtime)
        started = time.perf_counter()
        outcome = await alookup(
            branch.retriever, self.lookup_call(task, config, runtime), branch.timeout_seconds
        )
        return self._finish(task, started, outcome, None, runtime)

    def _finish(
        self,
        task: RetrieveTask,
        started: float,
        outcome: Lookup[list[BranchHit]],
        hybrid: FallbackRetriever | None,
        runtime: Runtime[Any] | None,
    ) -> dict[str, Any] | Command:
        result = self.branch_result(
            task,
            started,
            outcome.result or [],
            outcome.error_text,
            error=outcome.error,
            served_by=hybrid.primary_name if hybrid is not None else None,
        )
        return self.emit(task, result, {"retrieve": result["latency_ms"]}, runtime)

    def branch_result(
        self,
        task: RetrieveTask,
        started: float,
        hits: list[BranchHit],
        message: str | None,
        *,
        error: BaseException | None = None,
        served_by: str | None = None,
        fallback_reason: str | None = None,
        elapsed_ms: float = 0.0,
    ) -> BranchResult:
        """A finished branch: ``message`` (a failure's text) goes through ``on_failure``.
        ``served_by`` is set for hybrid branches, with ``fallback_reason`` when the fallback
        served."""
        branch = self.branches[task["retriever"]]
        view = task["view"]
        warning = None
        if message is not None:
            warning = apply_failure_policy(
                branch.on_failure,
                f"retriever '{branch.name}'",
                message,
                warning=f"retriever '{branch.name}' failed on {view['kind']} view {view['index']}",
                cause=error,
            )
        result = BranchResult(
            branch=branch_key(view["index"], branch.name),
            view_index=view["index"],
            view=view["text"],
            view_kind=view["kind"],
            retriever=branch.name,
            retriever_index=branch.index,
            status="failed" if message is not None else ("ok" if hits else "empty"),
            hits=hits,
            latency_ms=elapsed_ms + (time.perf_counter() - started) * 1000,
            error=message,
            warning=warning,
        )
        if served_by is not None:
            result.update(
                served_by=served_by,
                fallback_used=fallback_reason is not None,
                fallback_reason=fallback_reason,
            )
        return result

    def _to_fallback(
        self,
        task: RetrieveTask,
        started: float,
        primary: Lookup[list[BranchHit]],
        prefetched: Lookup[list[BranchHit]] | None,
    ) -> Command:
        """Hand a hybrid branch whose primary failed or was empty to the ``fallback`` node."""
        elapsed = (time.perf_counter() - started) * 1000
        payload = FallbackTask(
            task=task,
            reason=fallback_reason(primary.error_text),
            primary_error=primary.error_text,
            elapsed_ms=elapsed,
        )
        if prefetched is not None:
            payload["prefetched"] = PrefetchedFallback(
                hits=prefetched.result or [],
                error=prefetched.error_text,
                latency_ms=prefetched.latency_ms,
            )
        update = {"timings": {"retrieve": elapsed}}
        return Command(update=update, goto=Send("fallback", payload))

    def emit(
        self,
        task: RetrieveTask,
        result: BranchResult,
        timings: dict[str, float],
        runtime: Runtime[Any] | None = None,
    ) -> dict[str, Any] | Command:
        """A finished branch goes to its rerank task (unless the run switched reranking off),
        or straight to fusion."""
        report_progress(result)
        if self.rerank and knob(runtime, "rerank") is False:
            return Command(update={"branch_results": [result], "timings": timings}, goto="fuse")
        if self.rerank:
            return Command(
                update={"timings": timings},
                goto=Send("rerank", {"result": result, "query": task["query"]}),
            )
        return {"branch_results": [result], "timings": timings}
