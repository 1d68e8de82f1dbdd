"""The ``retrieve`` node: one task per (query view, retriever), sent by the fan-out.

A branch never raises into its siblings: an error, a timeout or an empty result is recorded in
its ``BranchResult``. Only ``on_failure: block`` stops the request. Sync retrievers run off the
event loop (LangChain's ``ainvoke`` runs them in an executor), so branches overlap.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypedDict

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.types import Command, Send
from parallel_rag.backends.base import (
    SCORE_KEY,
    RetrievalKind,
    matches_filter,
    supports_search_kwargs,
)
from parallel_rag.nodes.errors import BlockedError
from parallel_rag.nodes.records import BranchHit, BranchResult, FailurePolicy, QueryView, branch_key

MAX_ERROR_CHARS = 500
_SYNC_TIMEOUT_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="parallel-rag-branch")


@dataclass(frozen=True)
class RetrievalBranch:
    """A retriever as the graph runs it: the object plus its branch settings."""

    name: str
    index: int
    retriever: BaseRetriever
    kind: RetrievalKind
    top_k: int | None = None
    on_failure: FailurePolicy = "warn"
    timeout_seconds: float = 30.0


class RetrieveTask(TypedDict):
    """The payload of one ``Send("retrieve", ...)``."""

    view: QueryView
    retriever: str
    query: str
    top_k: int
    filters: dict[str, Any]


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
    """A bounded, single-line description of a branch failure."""
    text = str(error).strip().replace("\n", " ")
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text[:MAX_ERROR_CHARS]


class RetrieveNode:
    """Runs one branch; sync and async forms share everything but the call itself."""

    def __init__(self, branches: Mapping[str, RetrievalBranch], *, rerank: bool):
        self.branches = dict(branches)
        self.rerank = rerank

    def _call_args(self, task: RetrieveTask) -> tuple[RetrievalBranch, int, dict[str, Any]]:
        branch = self.branches[task["retriever"]]
        limit = branch.top_k or 2 * task["top_k"]
        kwargs: dict[str, Any] = {}
        if supports_search_kwargs(branch.retriever):
            kwargs = {"k": limit, "filters": task["filters"] or None}
        return branch, limit, kwargs

    def _finish(
        self,
        task: RetrieveTask,
        branch: RetrievalBranch,
        limit: int,
        started: float,
        docs: Sequence[Document] | None,
        error: BaseException | None,
    ) -> dict[str, Any] | Command:
        view = task["view"]
        hits: list[BranchHit] = []
        message = None
        if error is None:
            try:
                hits = documents_to_hits(
                    docs or [],
                    limit=limit,
                    filters=task["filters"],
                    post_filter=not supports_search_kwargs(branch.retriever),
                )
            except Exception as exc:  # malformed documents are a backend failure too
                error = exc
        if error is not None:
            message = (
                f"timed out after {branch.timeout_seconds:g}s"
                if isinstance(error, TimeoutError | FutureTimeout)
                else describe_error(error)
            )
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
        timings = {"retrieve": result["latency_ms"]}
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
        future = _SYNC_TIMEOUT_POOL.submit(
            branch.retriever.invoke, task["view"]["text"], config, **kwargs
        )
        try:
            docs = future.result(timeout=branch.timeout_seconds)
        except Exception as exc:
            future.cancel()
            error = exc
        return self._finish(task, branch, limit, started, docs, error)

    async def ainvoke(self, task: RetrieveTask, config: RunnableConfig) -> dict[str, Any] | Command:
        branch, limit, kwargs = self._call_args(task)
        started = time.perf_counter()
        docs, error = None, None
        try:
            docs = await asyncio.wait_for(
                branch.retriever.ainvoke(task["view"]["text"], config, **kwargs),
                timeout=branch.timeout_seconds,
            )
        except Exception as exc:
            error = exc
        return self._finish(task, branch, limit, started, docs, error)

    def as_runnable(self) -> RunnableLambda:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="retrieve")
