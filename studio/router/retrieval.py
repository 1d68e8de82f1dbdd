"""A route's retrieval at run time: the route's retrieval graph (up to fusion) on the
conversation (its recent text turns, the question last: ``request.conversation_turns``), through
the route's context cache. The graph resolves a follow-up against the earlier turns before it
retrieves; the cache is keyed on that resolution (``conversation.resolution_of``, the same
step, run first), so two conversations ending in the same words share evidence only when they
resolve to the same question. ``on_failure: block`` in the graph becomes a 503; a store or
model failure outside the branches' records leaves the request without context (``failed``
says why) for the route's ``on_failure`` to decide."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallel_rag.backends.shared.secrets import redact
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.studio.router.cache import ContextCache, RedisContextCache, cache_key
from parallel_rag.studio.router.configuration import Decision
from parallel_rag.studio.router.conversation import as_turns, resolution_of
from parallel_rag.studio.router.errors import RouterError
from parallel_rag.studio.router.plugin import RoutePipelineConfig
from parallel_rag.studio.router.request import RagOptions

logger = logging.getLogger(__name__)


@dataclass
class Route:
    """A route at run time: its decision, pipeline, compiled graph, cache, the store
    locations whose change empties the cache, and its conversation model (None: follow-ups
    are resolved without one), the same object its graph holds."""

    decision: Decision
    pipeline: RoutePipelineConfig | None
    graph: Any = None  # the retrieval graph it runs
    graphs: Any = None  # RAGGraphs: the graphs compiled for it (warm_up), when we built them
    cache: ContextCache | RedisContextCache | None = None
    locations: list[Path] = field(default_factory=list)
    conversation_model: Any = None

    @property
    def name(self) -> str:
        return self.decision.name


@dataclass
class RetrievalOutcome:
    documents: list[dict[str, Any]]
    branches: list[dict[str, Any]]
    warnings: list[str]
    cache: str = "off"  # hit | miss | off | unavailable (a shared cache that is down)
    failed: str | None = None  # why there is no context, when retrieval itself failed
    resolution: dict[str, Any] | None = None  # what was retrieved on (a ResolutionRecord)


def retrieval_request(
    route: Route, conversation: str | Sequence[Mapping[str, Any]], options: RagOptions | None
) -> dict[str, Any]:
    """The graph input for ``conversation`` (text turns, the question last, or a bare
    question) on ``route``, with the caller's ``rag`` options."""
    rag = route.decision.rag
    assert rag is not None
    request: dict[str, Any] = {"messages": as_turns(conversation), "top_k": rag.injected_top_k()}
    if options is not None:
        if options.top_k is not None:
            request["top_k"] = options.top_k
        if options.filters:
            request["filters"] = dict(options.filters)
        if options.tenant is not None:
            request["tenant"] = options.tenant
    return request


async def resolve(route: Route, rag_request: dict[str, Any]) -> dict[str, Any]:
    """What ``rag_request``'s conversation is retrieved on (off the event loop when the
    route's conversation model may be asked)."""
    turns = rag_request["messages"]
    if route.conversation_model is not None and len(turns) > 1:
        return dict(await asyncio.to_thread(resolution_of, turns, route.conversation_model))
    return dict(resolution_of(turns))


async def retrieve(
    route: Route, conversation: str | Sequence[Mapping[str, Any]], options: RagOptions | None
) -> RetrievalOutcome:
    """The fused documents for ``conversation`` (text turns, the question last:
    ``request.conversation_turns``; or a bare question) on ``route``, from the cache when it
    holds what the conversation resolves to."""
    assert route.pipeline is not None and route.graph is not None
    rag_request = retrieval_request(route, conversation, options)
    key = generation = None
    cache = route.cache
    if cache is not None:
        resolution = await resolve(route, rag_request)
        key = cache_key(route.name, route.pipeline, resolution, rag_request)
        cached, generation = await asyncio.to_thread(cache.lookup, key, route.locations)
        if cached is not None:
            return RetrievalOutcome(**{"resolution": resolution, **cached, "cache": "hit"})
    outcome = await run_graph(route, rag_request)
    if cache is not None:
        outcome.cache = "miss"
        clean = outcome.failed is None and not any(
            b.get("status") == "failed" for b in outcome.branches
        )
        if outcome.resolution is not None and outcome.resolution != resolution:
            # the graph retrieved on something else (its model failed where ours did not,
            # or the reverse): file the context under what it was actually retrieved on
            key = cache_key(route.name, route.pipeline, outcome.resolution, rag_request)
        if clean and outcome.documents:
            value = {
                "documents": outcome.documents,
                "branches": outcome.branches,
                "warnings": outcome.warnings,
                "resolution": outcome.resolution or resolution,
            }
            await asyncio.to_thread(cache.put, key, generation, value)
        if cache.unavailable:  # a shared cache that is down: served without it, said so
            outcome.cache = "unavailable"
            outcome.warnings = [*outcome.warnings, cache.unavailable]
    return outcome


async def run_graph(route: Route, rag_request: dict[str, Any]) -> RetrievalOutcome:
    """The route's retrieval graph (it ends at ``fuse``; the one place the router runs a
    graph)."""
    try:
        fused = await route.graph.ainvoke(rag_request)
        resolution = fused.get("resolution")
        return RetrievalOutcome(
            documents=list(fused.get("documents") or []),
            branches=list(fused.get("branches") or []),
            warnings=list(fused.get("warnings") or []),
            resolution=dict(resolution) if resolution else None,
        )
    except BlockedError as error:
        raise RouterError(
            503, str(error), kind="service_unavailable", code="on_failure_block"
        ) from None
    except RouterError:
        raise
    except Exception as error:  # a store or model failure outside the branches' records
        logger.warning("route %s: retrieval failed: %s", route.name, redact(str(error)))
        return RetrievalOutcome([], [], [], failed=redact(f"{type(error).__name__}: {error}"))
