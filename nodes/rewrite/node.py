"""The ``rewrite`` node: the configured rewriter turns the question into query views.

Views are de-duplicated on their stripped text; the original stays first unless
``include_original`` is off. A rewriter failure or empty output follows ``on_failure``; under
skip/warn the request falls back to the original query alone.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.errors import GraphBubbleUp
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.records import FailurePolicy, QueryView
from parallel_rag.nodes.retrieve import describe_error

logger = logging.getLogger(__name__)


class QueryRewriter(Protocol):
    def rewrite(self, query: str, config=None) -> list[tuple[str, str]]: ...

    async def arewrite(self, query: str, config=None) -> list[tuple[str, str]]: ...


def assemble_views(
    query: str, rewritten: list[tuple[str, str]], *, include_original: bool
) -> list[QueryView]:
    """Original first (when kept), then rewrites, de-duplicated on exact stripped text."""
    candidates = ([(query, "original")] if include_original else []) + list(rewritten)
    views: list[QueryView] = []
    seen: set[str] = set()
    for text, kind in candidates:
        text = text.strip()
        if not text or text in seen:
            continue
        seen.add(text)
        views.append(QueryView(index=len(views), text=text, kind=kind))  # type: ignore[typeddict-item]
    return views


class RewriteNode:
    """Calls the rewriter and applies the failure policy."""

    def __init__(
        self, rewriter: QueryRewriter, *, include_original: bool, on_failure: FailurePolicy
    ):
        self.rewriter = rewriter
        self.include_original = include_original
        self.on_failure = on_failure

    def _finish(self, query: str, started: float, rewritten, error) -> dict[str, Any]:
        warnings: list[str] = []
        views: list[QueryView] = []
        if error is None:
            # empty output is an error even when the original is kept (DESIGN §4)
            if not any(text.strip() for text, _ in rewritten or []):
                error = ValueError("the rewriter produced no query view")
            else:
                views = assemble_views(query, rewritten, include_original=self.include_original)
        if error is not None:
            message = describe_error(error)
            if self.on_failure == "block":
                raise BlockedError("rewriter", message) from error
            # recorded under every policy: the log always, the result's warnings under warn
            logger.warning("rewriter failed (on_failure=%s): %s", self.on_failure, message)
            if self.on_failure == "warn":
                warnings.append(f"rewriter failed, using the original query only: {message}")
            views = [QueryView(index=0, text=query.strip(), kind="original")]
        return {
            "views": views,
            "warnings": warnings,
            "timings": {"rewrite": (time.perf_counter() - started) * 1000},
        }

    def invoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            rewritten, error = self.rewriter.rewrite(state["query"], config), None
        except GraphBubbleUp:
            raise
        except Exception as exc:
            rewritten, error = None, exc
        return self._finish(state["query"], started, rewritten, error)

    async def ainvoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            rewritten, error = await self.rewriter.arewrite(state["query"], config), None
        except GraphBubbleUp:
            raise
        except Exception as exc:
            rewritten, error = None, exc
        return self._finish(state["query"], started, rewritten, error)

    def as_runnable(self) -> RunnableLambda:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="rewrite")
