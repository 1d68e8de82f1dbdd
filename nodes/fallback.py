"""The ``fallback`` node: the second leg of a ``hybrid`` branch, as a real edge of the graph.

``retrieve`` sends a hybrid branch here (``Send("fallback", FallbackTask)``) only when its
primary failed or returned nothing. With ``strategy: sequential`` this node runs the fallback
backend now (``HybridRetriever.run_fallback``); with ``parallel`` the lookup was started beside
the primary and its outcome arrives in the payload. Either way the branch record says the
fallback served it (``served_by``, ``fallback_used``) and why (``fallback_reason``); then the
branch goes on to ``rerank`` or ``fuse`` exactly as a primary result would. Only when the
fallback fails too does the branch count as failed, under the branch's ``on_failure``.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Command
from parallel_rag.nodes.retrieve import FallbackTask, RetrieveNode


class FallbackNode:
    """Runs (or collects) a hybrid branch's fallback lookup and records who served."""

    def __init__(self, retrieve: RetrieveNode):
        self.retrieve = retrieve

    def invoke(
        self, payload: FallbackTask, config: RunnableConfig, runtime: Runtime[Any] | None = None
    ) -> dict[str, Any] | Command:
        started = time.perf_counter()
        task = payload["task"]
        hybrid = self.retrieve.branches[task["retriever"]].hybrid
        assert hybrid is not None and hybrid.fallback is not None
        if "prefetched" in payload:
            done = payload["prefetched"]
            hits, message, latency_ms = done["hits"], done["error"], done["latency_ms"]
        else:
            outcome = hybrid.run_fallback(self.retrieve.lookup_call(task, config, runtime))
            hits, message = outcome.result or [], outcome.error_text
            latency_ms = (time.perf_counter() - started) * 1000
        if message is not None:
            message = f"{payload['reason']}; fallback '{hybrid.fallback_name}' failed: {message}"
        result = self.retrieve.branch_result(
            task,
            started,
            hits,
            message,
            served_by=hybrid.fallback_name,
            fallback_reason=payload["reason"],
            elapsed_ms=payload["elapsed_ms"],
        )
        return self.retrieve.emit(task, result, {"fallback": latency_ms}, runtime)
