"""The ``fallback`` node: the second leg of a ``hybrid`` branch, as a real edge of the graph.

``retrieve`` sends a hybrid branch here (``Send("fallback", FallbackTask)``) only when its
primary failed or returned nothing. With ``strategy: sequential`` this node runs the fallback
backend now; with ``parallel`` the lookup was started beside the primary and its outcome arrives
in the payload. Either way the branch record says the fallback served it (``served_by``,
``fallback_used``) and why (``fallback_reason``); then the branch goes on to ``rerank`` or
``fuse`` exactly as a primary result would. Only when the fallback fails too does the branch
count as failed, under the branch's ``on_failure``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.types import Command
from parallel_rag.backends.hybrid import HybridRetriever
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.records import BranchHit, BranchResult, branch_key
from parallel_rag.nodes.retrieve import (
    _SYNC_TIMEOUT_POOL,
    FallbackPlan,
    FallbackTask,
    RetrievalBranch,
    RetrieveNode,
    failure_message,
    search_kwargs,
)


class FallbackNode:
    """Runs (or collects) a hybrid branch's fallback lookup and records who served."""

    def __init__(self, retrieve: RetrieveNode):
        self.retrieve = retrieve

    def _conclude(
        self,
        payload: FallbackTask,
        started: float,
        hits: list[BranchHit],
        message: str | None,
        latency_ms: float,
    ) -> dict[str, Any] | Command:
        task = payload["task"]
        branch = self.retrieve.branches[task["retriever"]]
        plan = branch.fallback
        assert plan is not None
        view = task["view"]
        error = None
        if message is not None:
            error = f"{payload['reason']}; fallback '{plan.name}' failed: {message}"
            if branch.on_failure == "block":
                raise BlockedError(f"retriever '{branch.name}'", error)
        result = BranchResult(
            branch=branch_key(view["index"], branch.name),
            view_index=view["index"],
            view=view["text"],
            view_kind=view["kind"],
            retriever=branch.name,
            retriever_index=branch.index,
            status="failed" if error is not None else ("ok" if hits else "empty"),
            hits=hits,
            latency_ms=payload["elapsed_ms"] + (time.perf_counter() - started) * 1000,
            error=error,
            warning=(
                f"retriever '{branch.name}' failed on {view['kind']} view {view['index']}: {error}"
                if error is not None and branch.on_failure == "warn"
                else None
            ),
            served_by=plan.name,
            fallback_used=True,
            fallback_reason=payload["reason"],
        )
        return self.retrieve.emit(task, result, {"fallback": latency_ms})

    def invoke(self, payload: FallbackTask, config: RunnableConfig) -> dict[str, Any] | Command:
        started = time.perf_counter()
        if "prefetched" in payload:
            done = payload["prefetched"]
            return self._conclude(payload, started, done["hits"], done["error"], done["latency_ms"])
        task = payload["task"]
        branch, limit, _ = self.retrieve._call_args(task)
        plan = branch.fallback
        assert plan is not None
        docs, error = None, None
        future = _SYNC_TIMEOUT_POOL.submit(
            plan.retriever.invoke,
            task["view"]["text"],
            config,
            **search_kwargs(plan.retriever, limit, task["filters"]),
        )
        try:
            docs = future.result(timeout=plan.timeout_seconds)
        except Exception as exc:
            future.cancel()
            error = exc
        return self._finish(payload, started, plan, limit, docs, error)

    async def ainvoke(
        self, payload: FallbackTask, config: RunnableConfig
    ) -> dict[str, Any] | Command:
        started = time.perf_counter()
        if "prefetched" in payload:
            done = payload["prefetched"]
            return self._conclude(payload, started, done["hits"], done["error"], done["latency_ms"])
        task = payload["task"]
        branch, limit, _ = self.retrieve._call_args(task)
        plan = branch.fallback
        assert plan is not None
        docs, error = None, None
        try:
            docs = await asyncio.wait_for(
                plan.retriever.ainvoke(
                    task["view"]["text"],
                    config,
                    **search_kwargs(plan.retriever, limit, task["filters"]),
                ),
                timeout=plan.timeout_seconds,
            )
        except Exception as exc:
            error = exc
        return self._finish(payload, started, plan, limit, docs, error)

    def _finish(self, payload, started, plan, limit, docs, error) -> dict[str, Any] | Command:
        hits, error = self.retrieve.outcome(payload["task"], plan.retriever, limit, docs, error)
        message = None if error is None else failure_message(error, plan.timeout_seconds)
        latency = (time.perf_counter() - started) * 1000
        return self._conclude(payload, started, hits, message, latency)

    def as_runnable(self) -> RunnableLambda:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="fallback")


def split_hybrid(branch: RetrievalBranch) -> RetrievalBranch:
    """A branch over a ``HybridRetriever`` becomes its primary plus a ``FallbackPlan``, so the
    graph runs the fallback in its own node; any other branch is returned unchanged."""
    hybrid = branch.retriever
    if not isinstance(hybrid, HybridRetriever):
        return branch
    plan = None
    if hybrid.fallback is not None:
        plan = FallbackPlan(
            name=hybrid.fallback_name,
            retriever=hybrid.fallback,
            strategy=hybrid.strategy,
            timeout_seconds=hybrid.fallback_timeout_seconds,
        )
    return replace(
        branch,
        retriever=hybrid.primary,
        timeout_seconds=hybrid.primary_timeout_seconds,
        served_by=hybrid.primary_name,
        fallback=plan,
    )
