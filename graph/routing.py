"""Routing functions: the conditional entry and the Send fan-out.

One ``Send("retrieve", ...)`` per (query view, retriever), except that HyDE views go to dense
retrievers only. Every branch gets the request's filters, with the tenant as a mandatory filter.
The run's knobs (``graph/context.py``) are the runtime context LangGraph injects over the
knobs in the run's ``configurable`` (``knobs_from``): which retrievers run and whether the
rewriter does are read here; the nodes read the rest (candidate count, rerank, fusion)
themselves, the same way (``graph/steps.py``).

The entry runs as the run starts, before any node (a conditional edge from START): it checks
the run's knobs against what the pipeline can honour (``KnobScope.check``, a ``KnobError``
naming the field) and the run's request (``graph/request.py``: its first task writes the
request's shape into the state), opens the run's hold on each store's live revision
(``backends/shared/revisions.py``; LangGraph runs it in a worker thread under
``ainvoke``/``astream``,
so opening a new revision never blocks the event loop), and starts embedding the original query
for the dense branches that will search it (``QueryPrefetch``), so the encode runs while the
graph schedules the branches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Send
from parallel_rag.backends.base import query_embedding
from parallel_rag.backends.encoders.embeddings import loaded_embeddings
from parallel_rag.backends.shared.revisions import (
    close_run,
    hold_stores_for_run,
    open_run,
    within_run,
)
from parallel_rag.graph.context import KnobScope, RAGContext, knobs_from
from parallel_rag.graph.request import REQUEST, accept_request
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


def run_knobs(runtime: Runtime[Any], config: RunnableConfig | None) -> RAGContext:
    """The run's knobs: its runtime context over the knobs in its ``configurable``."""
    return knobs_from(runtime.context, (config or {}).get("configurable"))


def make_entry_router(
    branches: Sequence[RetrievalBranch],
    tenant_field: str,
    has_rewriter: bool,
    prefetch: QueryPrefetch | None = None,
    *,
    contextualize: bool = False,
    scope: KnobScope | None = None,
):
    """The conditional entry (``contextualize=True``, the graph's entry): checks the run's
    knobs against ``scope`` and its request (``graph/request.py``: the first task it starts
    writes the request's shape into the state) and holds the stores' revisions for the run; to
    ``contextualize`` when the conversation has earlier messages; else it starts the query
    ``prefetch``, then goes to ``rewrite`` when a rewriter is configured (and the run does not
    switch it off), or straight to the fan-out with the question. After ``contextualize`` the
    same router runs with ``contextualize=False``."""
    retrievers = [b.retriever for b in branches]

    def route_request(
        state: dict[str, Any], config: RunnableConfig, runtime: Runtime[RAGContext]
    ) -> str | list[Send]:
        knobs = run_knobs(runtime, config)
        update = None
        if contextualize:  # the run starts: nothing has run yet
            if scope is not None:
                scope.check(knobs)
            state, update = accept_request(state, config)  # its first task writes ``update``
        if contextualize and len(state["messages"]) > 1:
            route: str | list[Send] = [Send("contextualize", {**state, REQUEST: update})]
        elif has_rewriter and knobs.rewriter != "none":
            route = "rewrite" if update is None else [Send("rewrite", {**state, REQUEST: update})]
        else:
            route = fan_out(state, original_view(state), branches, tenant_field, knobs)
            if update is not None and route:
                # the first branch writes the request; the question it adds to the
                # conversation rides in its payload too, so no stream shows it as the
                # branch's own message
                first = route[0]
                carried = {REQUEST: update, "messages": update.get("messages", [])}
                route[0] = Send(first.node, {**first.arg, **carried})
        if not (contextualize and len(state["messages"]) > 1) and prefetch is not None:
            prefetch.start(state["query"], knobs)
        if contextualize:  # every later search of the run reads what is live now
            open_run(runtime.control)
            with within_run(runtime.control):
                hold_stores_for_run(retrievers)
        return route

    return route_request


def make_view_router(branches: Sequence[RetrievalBranch], tenant_field: str):
    """After ``rewrite``: fan the rewritten views out to the retrievers the run uses."""

    def route_views(
        state: dict[str, Any], config: RunnableConfig, runtime: Runtime[RAGContext]
    ) -> list[Send]:
        views = state.get("views") or original_view(state)
        try:
            return fan_out(state, views, branches, tenant_field, run_knobs(runtime, config))
        except BaseException:  # the run fails here: its held revisions go
            close_run(runtime.control)
            raise

    return route_views
