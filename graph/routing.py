"""Routing functions: the conditional entry and the Send fan-out.

One ``Send("retrieve", ...)`` per (query view, retriever), except that HyDE views go to dense
retrievers only. Every branch gets the request's filters, with the tenant as a mandatory filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.types import Send
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
) -> list[Send]:
    """One retrieve task per (view, retriever); HyDE views reach dense retrievers only."""
    filters = branch_filters(state, tenant_field)
    sends = []
    for view in views:
        for branch in branches:
            if view["kind"] == "hyde" and branch.kind != "dense":
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


def make_entry_router(branches: Sequence[RetrievalBranch], tenant_field: str, has_rewriter: bool):
    """The conditional entry: to ``rewrite`` when a rewriter is configured, else straight to
    the fan-out with the original query as the only view."""

    def route_request(state: dict[str, Any]):
        if has_rewriter:
            return "rewrite"
        return fan_out(state, original_view(state), branches, tenant_field)

    return route_request


def make_view_router(branches: Sequence[RetrievalBranch], tenant_field: str):
    """After ``rewrite``: fan the rewritten views out to the retrievers."""

    def route_views(state: dict[str, Any]) -> list[Send]:
        return fan_out(state, state.get("views") or original_view(state), branches, tenant_field)

    return route_views
