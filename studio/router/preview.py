"""Route preview: which route a request would take, why, what its conversation would be
retrieved on (``resolution``: the follow-up written out with its subject, or the question as
written, and why), and the retrieval plan it would run (branches, views, rerank, fusion, what
is injected), read from the route's compiled configuration. Nothing is retrieved, no store is
opened, nothing is timed; a route with a conversation model asks it, as the request would (the
request then reuses its answer)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallel_rag.backends.registry import entry_summary
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.graph.fitted_fusion import current_plan
from parallel_rag.studio.router.cache import embedding_name, scorer_name
from parallel_rag.studio.router.configuration import Decision
from parallel_rag.studio.router.conversation import resolution_of
from parallel_rag.studio.router.errors import validated
from parallel_rag.studio.router.matching import RouteChoice
from parallel_rag.studio.router.request import (
    PreviewRequest,
    RagOptions,
    conversation_turns,
    last_user_text,
)

if TYPE_CHECKING:
    from parallel_rag.studio.router.runtime import RouterRuntime


def retrieval_plan(decision: Decision, pipeline: PipelineConfig | None) -> dict[str, Any]:
    """What retrieval a route would run (no store is opened, nothing is timed)."""
    rag = decision.rag
    if rag is None or pipeline is None:
        return {"retrieval": False}
    branches = []
    for entry in pipeline.retrievers:
        branch: dict[str, Any] = {
            "retriever": entry.name,
            "backend": entry.backend,
            "kind": "dense" if entry.is_dense else "lexical",
            "top_k": entry.top_k,
            "similarity_threshold": entry.similarity_threshold,
            "on_failure": entry.on_failure or pipeline.on_failure,
        }
        branch.update(entry_summary(entry))  # e.g. a hybrid's legs and strategy
        branches.append(branch)
    rewriter = pipeline.rewriter
    reranker = pipeline.reranker
    return {
        "retrieval": True,
        "form": "pipeline" if rag.is_pipeline else "single_backend",
        "branches": branches,
        "views": (
            {"rewriter": rewriter.kind, "num_queries": rewriter.num_queries}
            if rewriter is not None
            else {"rewriter": None}
        ),
        "rerank": (
            None
            if reranker is None
            else {
                "kind": reranker.kind,
                "scorer": scorer_name(pipeline),
                "top_k": reranker.top_k,
                "max_candidates": reranker.max_candidates,
            }
        ),
        "fusion": fusion_plan(pipeline),
        "documents_injected": rag.injected_top_k(),
        "injection_mode": rag.injection_mode,
        "max_context_length": rag.max_context_length,
        "on_failure": rag.on_failure,
        "embedding": embedding_name(pipeline),
    }


def fusion_plan(pipeline: PipelineConfig) -> dict[str, Any]:
    """The fusion the route's graph runs (``build_graph`` gives the fuse node these settings):
    the method, RRF's ``k`` when the method is rrf, ``dense_weight``, and the weight of every
    retriever (``weights`` by name, else ``dense_weight`` for a dense one, else 1)."""
    fusion = pipeline.fusion
    dense = [entry.name for entry in pipeline.retrievers if entry.is_dense]
    weights = fusion.weights_for(dense)
    plan: dict[str, Any] = {"method": fusion.method}
    if fusion.method == "rrf":
        plan["k"] = fusion.k
    plan["dense_weight"] = fusion.dense_weight
    plan["weights"] = {entry.name: weights.get(entry.name, 1.0) for entry in pipeline.retrievers}
    return plan


def fitted_fusion_plan(pipeline: PipelineConfig, base_dir: Path) -> dict[str, Any]:
    """``fusion_plan`` as a request without fusion knobs gets it from the route's stores under
    ``base_dir``: the fitted settings when the route's configuration sets no fusion and a fit
    was made (``graph.fitted_fusion``), with ``source`` (default, configuration, fitted), the
    fit's evidence in brief and why a default is in use."""
    plan = fusion_plan(pipeline)
    account = current_plan(pipeline, base_dir).account([e.name for e in pipeline.retrievers])
    plan.update(account)
    if account["source"] == "fitted":
        plan.pop("dense_weight", None)  # the fit sets every weight by name
        if account["method"] != "rrf":
            plan.pop("k", None)
    return plan


def preview(runtime: RouterRuntime, body: dict[str, Any]) -> dict[str, Any]:
    """The preview of a ``/v1/route/preview`` body (a chat body; ``model`` defaults to auto)."""
    request = validated(PreviewRequest, body)
    messages = [m.model_dump(exclude_unset=True) for m in request.messages]
    choice = runtime.matcher.choose(request.model, last_user_text(messages))
    route = runtime.routes[choice.name]
    turns = conversation_turns(messages)
    resolution = None
    if route.decision.rag is not None and turns:  # what the chat request would retrieve on
        resolution = dict(resolution_of(turns, route.conversation_model))
    return describe(runtime, choice, request.rag, resolution)


def describe(
    runtime: RouterRuntime,
    choice: RouteChoice,
    options: RagOptions | None,
    resolution: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The chosen route, why, its upstream, what the request would be retrieved on
    (``resolution``: None without retrieval or without a question) and its retrieval plan
    (``options.top_k`` counted)."""
    route = runtime.routes[choice.name]
    upstream = runtime.config.upstream_for(route.decision)
    plan = retrieval_plan(route.decision, route.pipeline)
    if plan["retrieval"]:  # the settings fitted to the route's corpus, when they apply
        plan["fusion"] = fitted_fusion_plan(route.pipeline, runtime.base_dir)
    if plan["retrieval"] and options is not None and options.top_k is not None:
        plan["documents_injected"] = options.top_k
    if plan["retrieval"] and route.cache is not None:
        plan["context_cache"] = {
            "max_entries": route.cache.max_entries,
            "ttl_seconds": route.cache.ttl,
        }
    return {
        "route": route.name,
        "upstream_model": route.decision.model,
        "upstream": upstream.base_url,
        "reason": choice.reason,
        "signals": choice.signals,
        "resolution": resolution,
        "plan": plan,
    }
