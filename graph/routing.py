"""Routing functions: the conditional entry and the Send fan-out.

One ``Send("retrieve", ...)`` per (query view, retriever), except that HyDE views go to dense
retrievers only. Every branch gets the request's filters, with the tenant as a mandatory filter.
The run's knobs (``graph/context.py``, checked as the run starts) are read here from the
injected ``runtime.context``: which retrievers run and whether the rewriter does; the nodes
read the rest (candidate count, rerank, fusion) from the same context themselves.

The entry also starts embedding the original query for the dense branches that will search it
(``QueryPrefetch``), so the encode runs while the graph schedules the branches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send
from parallel_rag.backends.base import query_embedding
from parallel_rag.backends.embeddings import loaded_embeddings
from parallel_rag.graph.context import RAGContext
from parallel_rag.graph.state import MAX_QUERY_CHARS
from parallel_rag.nodes.records import QueryView
from parallel_rag.nodes.retrieve import RetrievalBranch, RetrieveTask


def branch_filters(state: dict[str, Any], tenant_field: str) -> dict[str, Any]:
    """The request's filters, plus the tenant as a filter no request can override."""
    filters = dict(state.get("filters") or {})
    tenant = state.get("tenant")
    if tenant is not None:
        if tenant_field in filters and filters[tenant_field] != tenant:
            raise ValueError(f"filters.{tenant_field}: conflicts with the request's tenant")
        filters[tenant_field] = tenant
    return filters


def fan_out(
    state: dict[str, Any],
    views: Sequence[QueryView],
    branches: Sequence[RetrievalBranch],
    tenant_field: str,
    knobs: RAGContext | None = None,
) -> list[Send]:
    """One retrieve task per (view, retriever); HyDE views reach dense retrievers only,
    expansion (PRF) views lexical ones only."""
    filters = branch_filters(state, tenant_field)
    knobs = knobs or RAGContext()
    if knobs.retrievers is not None:
        branches = [b for b in branches if b.name in knobs.retrievers]
    follow_up = state.get("follow_up")
    if follow_up and all(v["text"] != follow_up.strip() for v in views):
        # the question as written stays a view beside its resolution: a wrong resolution
        # adds a view and cannot lose the question
        views = [*views, QueryView(index=len(views), text=follow_up.strip(), kind="follow_up")]
    sends = []
    for view in views:
        for branch in branches:
            if view["kind"] == "hyde" and branch.kind != "dense":
                continue
            if view["kind"] == "expansion" and branch.kind != "lexical":
                continue
            task = RetrieveTask(
                view=view,
                retriever=branch.name,
                query=state["query"],
                top_k=state["top_k"],
                filters=filters,
            )
            sends.append(Send("retrieve", task))
    return sends


def original_view(state: dict[str, Any]) -> list[QueryView]:
    return [QueryView(index=0, text=state["query"].strip(), kind="original")]


class QueryPrefetch:
    """Starts embedding a request's original query view on a background thread before its
    dense branches ask for it (``QueryOnceEmbeddings.prefetch_query``): they then join that
    computation instead of embedding the text themselves, and the encode, which releases the
    GIL, overlaps with the graph's own work up to the lookup. Only what the run will embed is
    started: the dense branches the ``retrievers`` knob keeps, when the original query is one of
    the run's views (no rewriter, the rewriter switched off, or ``include_original``), with a
    model some branch has loaded already (a first request loads it in its branch, as before)."""

    def __init__(
        self,
        branches: Sequence[RetrievalBranch],
        *,
        has_rewriter: bool = False,
        include_original: bool = True,
    ):
        self.models = {
            b.name: model
            for b in branches
            if b.kind == "dense" and (model := query_embedding(b.retriever)) is not None
        }
        self.has_rewriter = has_rewriter
        self.include_original = include_original

    def start(self, query: Any, knobs: RAGContext | None = None) -> int:
        """Start the prefetches for a request's ``query`` under its parsed ``knobs``; how many
        were started (0 when the vectors are kept or being computed already). Never raises:
        a query the graph will refuse is simply not prefetched."""
        if not self.models or not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
            return 0
        text = original_view({"query": query})[0]["text"]  # what the dense branch will embed
        if not text:
            return 0
        knobs = knobs or RAGContext()
        rewrites = self.has_rewriter and knobs.rewriter != "none"
        if rewrites and not self.include_original:
            return 0
        chosen = set(knobs.retrievers or self.models)
        started = 0
        for model in {m for name, m in self.models.items() if name in chosen}:
            prefetch = getattr(loaded_embeddings(*model), "prefetch_query", None)
            if prefetch is not None and prefetch(text):
                started += 1
        return started


def make_entry_router(
    branches: Sequence[RetrievalBranch],
    tenant_field: str,
    has_rewriter: bool,
    prefetch: QueryPrefetch | None = None,
    *,
    contextualize: bool = False,
):
    """The conditional entry: to ``contextualize`` when the conversation has earlier messages
    (``contextualize=True``, the graph's entry); else it starts the query ``prefetch``, then
    goes to ``rewrite`` when a rewriter is configured (and the run does not switch it off), or
    straight to the fan-out with the question. After ``contextualize`` the same router runs with
    ``contextualize=False``."""

    def route_request(state: dict[str, Any], runtime: Runtime[RAGContext]) -> str | list[Send]:
        if contextualize and len(state.get("messages") or ()) > 1:
            return "contextualize"
        knobs = runtime.context
        if prefetch is not None:
            prefetch.start(state["query"], knobs)
        if has_rewriter and (knobs is None or knobs.rewriter != "none"):
            return "rewrite"
        return fan_out(state, original_view(state), branches, tenant_field, knobs)

    return route_request


def make_view_router(branches: Sequence[RetrievalBranch], tenant_field: str):
    """After ``rewrite``: fan the rewritten views out to the retrievers the run uses."""

    def route_views(state: dict[str, Any], runtime: Runtime[RAGContext]) -> list[Send]:
        views = state.get("views") or original_view(state)
        return fan_out(state, views, branches, tenant_field, runtime.context)

    return route_views
