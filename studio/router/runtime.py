"""The routes of one router config at run time: each route's compiled graph, context cache and
store locations, the matcher and the upstream clients; and a chat completion's way through
them: validate, match, retrieve on the conversation (when the route has an enabled rag plugin:
its recent text turns, a follow-up resolved against them), inject, forward.

Every other field of the request goes to the upstream as sent (``model`` becomes the route's
upstream model; the router's own ``rag`` field is removed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi.responses import Response
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.registry import store_locations
from parallel_rag.graph.builder import build_graphs, graphs_of, retrieval_graph_of
from parallel_rag.studio.router import preview as previews
from parallel_rag.studio.router.cache import context_cache
from parallel_rag.studio.router.configuration import AUTO_MODEL, RouterConfig, load_router
from parallel_rag.studio.router.conversation import conversation_model
from parallel_rag.studio.router.errors import RouterError, validated
from parallel_rag.studio.router.injection import inject
from parallel_rag.studio.router.matching import RouteMatcher
from parallel_rag.studio.router.report import RESPONSE_FIELD, report_field, report_headers
from parallel_rag.studio.router.request import ChatRequest, conversation_turns, last_user_text
from parallel_rag.studio.router.retrieval import Route, retrieve
from parallel_rag.studio.router.upstream import Upstreams, forward_chat


class RouterRuntime:
    """The routes of one config with their compiled retrieval graphs, caches and upstream
    clients. ``graphs`` hands in a route's graphs already compiled (``build_graphs``' result
    whose answer graph LangServe serves for ``--route``: the route runs its retrieval graph,
    built from the same components), with the conversation model it was built with in
    ``conversation_models``;
    ``compile_graphs=False`` builds none (a preview opens no store, and resolves follow-ups
    without a model)."""

    def __init__(
        self,
        config: RouterConfig,
        base_dir: Path,
        *,
        graphs: Mapping[str, Any] | None = None,
        conversation_models: Mapping[str, Any] | None = None,
        compile_graphs: bool = True,
    ):
        self.config = config
        self.base_dir = base_dir
        cache_settings = config.routing.context_cache
        self.routes: dict[str, Route] = {}
        for decision in config.routing.decisions:
            pipeline = config.pipeline_for(decision.name)
            route = Route(decision, pipeline)
            if pipeline is not None:
                # what an ingest rewrites, as each backend declares it (remote: none, TTL only)
                route.locations = store_locations(pipeline.retrievers, base_dir)
                rag = decision.rag
                enabled = cache_settings.enabled if rag.cache_results is None else rag.cache_results
                if enabled:
                    ttl = rag.cache_ttl_seconds or cache_settings.ttl_seconds
                    route.cache = context_cache(decision.name, cache_settings, ttl)
                if graphs is not None and decision.name in graphs:
                    route.graphs = graphs_of(graphs[decision.name])
                    route.graph = retrieval_graph_of(graphs[decision.name])
                    route.conversation_model = (conversation_models or {}).get(decision.name)
                elif compile_graphs:
                    # one model object for the router and the graph: they share its memo
                    route.conversation_model = conversation_model(pipeline)
                    route.graphs = build_graphs(
                        pipeline,
                        answer=False,
                        base_dir=base_dir,
                        name=f"route:{decision.name}",
                        conversation_model=route.conversation_model,
                    )
                    route.graph = route.graphs.retrieval
            self.routes[decision.name] = route
        self.matcher = RouteMatcher(config)
        self.upstreams = Upstreams()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> RouterRuntime:
        config, _, base_dir = load_router(path)
        return cls(config, base_dir, **kwargs)

    def warm_up(self) -> None:
        """Load the matcher's model, and what each route's first request would load (its
        embedding model, its branches' indexes and stores: ``RAGGraphs.warm_up``), before
        traffic."""
        self.matcher.prepare()
        for route in self.routes.values():
            if route.graphs is not None:
                route.graphs.warm_up()
            elif route.pipeline is not None:
                embeddings = route.pipeline.embeddings
                load_embeddings(embeddings.model, embeddings.device)

    async def aclose(self) -> None:
        await self.upstreams.aclose()

    def preview(self, body: dict[str, Any]) -> dict[str, Any]:
        return previews.preview(self, body)

    # -- chat ------------------------------------------------------------------------------

    async def prepare_chat(self, body: dict[str, Any]) -> tuple[dict[str, Any], Route, dict]:
        """The body to forward, its route, and what to report about it (headers/field)."""
        request = validated(ChatRequest, body)
        messages = body["messages"]
        query = last_user_text(messages)
        if request.model == AUTO_MODEL:  # may embed the message: off the event loop
            choice = await asyncio.to_thread(self.matcher.choose, request.model, query)
        else:
            choice = self.matcher.choose(request.model, query)
        route = self.routes[choice.name]
        report: dict[str, Any] = {"route": route.name, "reason": choice.reason}
        forward = {k: v for k, v in body.items() if k != "rag"}
        forward["model"] = route.decision.model
        rag = route.decision.rag
        if rag is None:
            report["retrieval"] = False
            return forward, route, report
        report["retrieval"] = True
        turns = conversation_turns(messages)
        if turns:
            started = time.perf_counter()
            outcome = await retrieve(route, turns, request.rag)
            report.update(
                context_ms=round((time.perf_counter() - started) * 1000, 2),
                cache=outcome.cache,
                resolution=outcome.resolution,
                branches=outcome.branches,
                documents=[d["id"] for d in outcome.documents],
                warnings=list(outcome.warnings),
            )
            if route.cache is not None:
                report["cache_stats"] = route.cache.stats
            if outcome.documents:
                forward["messages"] = inject(
                    messages,
                    outcome.documents,
                    mode=rag.injection_mode,
                    max_context_length=rag.max_context_length,
                    query=(outcome.resolution or {}).get("retrieved_on") or turns[-1]["content"],
                )
                return forward, route, report
            why = outcome.failed or "retrieval found no documents"
        else:  # nothing to retrieve for: the route's "no context" policy, as for an empty store
            report.update(documents=[], warnings=[])
            why = "the request has no user message with text to retrieve for"
        if rag.on_failure == "block":
            raise RouterError(
                503,
                f"route {route.name!r}: no context ({why}) and its on_failure policy is 'block'",
                kind="service_unavailable",
                code="on_failure_block",
                headers=report_headers(report),
            )
        if rag.on_failure == "warn":
            report["warnings"].append(f"no context injected: {why}")
        return forward, route, report

    async def chat(self, body: dict[str, Any]) -> Response:
        forward, route, report = await self.prepare_chat(body)
        client, url = self.upstreams.client(route.decision, self.config)
        annotation = (RESPONSE_FIELD, report_field(report))
        return await forward_chat(client, url, forward, report_headers(report), annotation)

    def models(self) -> dict[str, Any]:
        data = [{"id": AUTO_MODEL, "object": "model", "created": 0, "owned_by": "parallel-rag"}]
        for route in self.routes.values():
            data.append(
                {
                    "id": route.name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "parallel-rag",
                    "upstream_model": route.decision.model,
                    "retrieval": route.decision.rag is not None,
                    "description": route.decision.description,
                }
            )
        return {"object": "list", "data": data}
