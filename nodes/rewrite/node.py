"""The ``rewrite`` node: the configured rewriter turns the question into query views.

Views are de-duplicated on their stripped text; the original stays first unless
``include_original`` is off. A rewriter failure or empty output follows ``on_failure``; under
skip/warn the request falls back to the original query alone. The run's ``rewriter`` knob
(``runtime.context``) is handed to a rewriter that can switch kind per run.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from parallel_rag.nodes.failure_policy import FailurePolicy, attempt
from parallel_rag.nodes.knobs import knob
from parallel_rag.nodes.records import QueryView


class QueryRewriter(Protocol):
    """Anything that turns a question into (text, kind) views. A rewriter that can switch kind
    per run also takes ``kind`` (the run's rewrite knob)."""

    def rewrite(self, query: str, config=None) -> list[tuple[str, str]]: ...


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

    def invoke(
        self, state: dict[str, Any], config: RunnableConfig, runtime: Runtime[Any] | None = None
    ) -> dict[str, Any]:
        started = time.perf_counter()
        query = state["query"]
        kind = knob(runtime, "rewriter")
        options = {"kind": kind} if kind not in (None, "none") else {}

        def views() -> list[QueryView]:
            rewritten = self.rewriter.rewrite(query, config, **options)
            # empty output is an error even when the original is kept
            if not any(text.strip() for text, _ in rewritten or []):
                raise ValueError("the rewriter produced no query view")
            return assemble_views(query, rewritten, include_original=self.include_original)

        done = attempt(
            views,
            self.on_failure,
            "rewriter",
            warning="rewriter failed, using the original query only",
        )
        original = [QueryView(index=0, text=query.strip(), kind="original")]
        return {
            "views": original if done.failed else done.value,
            "warnings": done.warnings,
            "timings": {"rewrite": (time.perf_counter() - started) * 1000},
        }
