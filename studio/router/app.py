"""The router's HTTP surface: ``POST /v1/chat/completions``, ``GET /v1/models`` and ``POST
/v1/route/preview``, mounted on the LangServe app by ``parallel-rag serve`` for a router file
(same process, same admission control); ``parallel-rag route`` previews from the command line.

Every failure is an OpenAI-style error ``{"error": {"message", "type", "param", "code"}}``:
400 for a malformed body (``param`` names the field), 404 for an unknown model, 503 for
``on_failure: block``, 502 when the upstream is down or fails, 504 when it times out.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from parallel_rag.graph.builder import build_graphs
from parallel_rag.studio.config_resolution import ResolvedConfig
from parallel_rag.studio.router.configuration import AUTO_MODEL
from parallel_rag.studio.router.conversation import conversation_model
from parallel_rag.studio.router.errors import RouterError
from parallel_rag.studio.router.request import read_json
from parallel_rag.studio.router.runtime import RouterRuntime


def openai_routes(runtime: RouterRuntime) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        try:
            return await runtime.chat(await read_json(request))
        except RouterError as error:
            return error.response()

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return runtime.models()

    @router.post("/v1/route/preview")
    async def route_preview(request: Request) -> Response:
        try:
            body = await read_json(request)
            return JSONResponse(await asyncio.to_thread(runtime.preview, body))
        except RouterError as error:
            return error.response()

    return router


def add_openai_routes(app: FastAPI, runtime: RouterRuntime) -> None:
    """Mount the router on ``app`` (the LangServe app: same process, same admission control)."""
    app.include_router(openai_routes(runtime))
    app.router.on_shutdown.append(runtime.aclose)


def create_router_app(config: ResolvedConfig, *, limits=None, langserve_path: str = "/rag"):
    """The served app for a router config: LangServe at ``langserve_path`` (the pipeline the
    resolver chose: ``--route``, the top-level pipeline, else the default or first retrieving
    route's) plus the OpenAI-compatible routes."""
    from parallel_rag.studio.admission import AdmissionControl, AdmissionLimits
    from parallel_rag.studio.langserve_app import create_app

    assert config.router is not None, "create_router_app needs a router config"
    graphs = model = None
    if config.pipeline is not None:
        name = "parallel-rag" if config.route is None else f"route:{config.route}"
        # a route's conversation model is shared by the route and its graph (one memo)
        model = conversation_model(config.pipeline) if config.route is not None else None
        graphs = build_graphs(
            config.pipeline, base_dir=config.base_dir, name=name, conversation_model=model
        )
    # --route's answer graph and that route's retrieval graph: one set of components
    shared = {config.route: graphs} if config.route is not None else None
    models = {config.route: model} if config.route is not None else None
    runtime = RouterRuntime(
        config.router, config.base_dir, graphs=shared, conversation_models=models
    )
    limits = limits or AdmissionLimits()
    if graphs is not None:
        app = create_app(graphs, path=langserve_path, limits=limits)
    else:
        app = FastAPI(title="parallel-rag router")
        app.add_middleware(AdmissionControl, limits=limits)

        @app.get("/healthz")
        async def healthz() -> dict[str, Any]:
            return {"status": "ok"}

    add_openai_routes(app, runtime)
    return app, runtime


def list_warnings(config) -> None:
    """Start-up: every line of the file this router does not do as written (what of a vLLM
    Semantic Router configuration could not map, a store block opening a local store...), on
    stderr, so nothing is dropped silently."""
    for line in config.warnings:
        print(f"parallel-rag router: warning: {line}", file=sys.stderr, flush=True)


def serve_router(
    config: ResolvedConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/rag",
    log_level: str = "info",
    limits=None,
) -> None:
    """``parallel-rag serve`` for a config with a ``routing`` section (blocks until stopped)."""
    import uvicorn

    app, runtime = create_router_app(config, limits=limits, langserve_path=path)
    list_warnings(runtime.config)
    runtime.warm_up()
    uvicorn.run(app, host=host, port=port, log_level=log_level)


def preview_question(config: ResolvedConfig, question: str, model: str = AUTO_MODEL) -> dict:
    """``parallel-rag route "question"``: the preview, without opening any store."""
    assert config.router is not None, "preview_question needs a router config"
    list_warnings(config.router)
    runtime = RouterRuntime(config.router, config.base_dir, compile_graphs=False)
    return runtime.preview({"model": model, "messages": [{"role": "user", "content": question}]})
