"""``parallel-rag serve --workers N``: N server processes on one port, under uvicorn's process
supervisor. Each worker resolves the same config, builds and warms up its own app (graph,
stores, models, context cache), exactly as a single ``serve`` does; the command's arguments
reach the workers through one environment variable (``WORKER_SETTINGS``, JSON).

Nothing that changes an answer lives in one worker when the stores are servers and the router's
context cache is in Redis (docs/cluster.md); an in-process context cache is per worker.
Admission control (``--max-concurrency``, ``--max-queue``) is per worker too: the process's
bound, times N for the port."""

from __future__ import annotations

import json
import os
from typing import Any

WORKER_SETTINGS = "PARALLEL_RAG_SERVE_WORKER"
"""The environment variable carrying the serve command's settings to its workers."""


def serve_workers(
    settings: dict[str, Any], *, workers: int, host: str, port: int, log_level: str = "info"
) -> None:
    """Run ``workers`` processes serving ``settings`` (``config``, ``route``, ``path``,
    ``limits``) on ``host:port`` (blocks until stopped)."""
    import uvicorn

    os.environ[WORKER_SETTINGS] = json.dumps(settings)
    uvicorn.run(
        "parallel_rag.studio.workers:app_from_environment",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
    )


def app_from_environment():
    """One worker's app, from ``WORKER_SETTINGS``: what ``serve`` would run in one process."""
    from parallel_rag.graph.builder import build_graphs
    from parallel_rag.studio.admission import AdmissionLimits
    from parallel_rag.studio.config_resolution import resolve_config
    from parallel_rag.studio.langserve_app import create_app

    settings = json.loads(os.environ[WORKER_SETTINGS])
    resolved = resolve_config(settings["config"], route=settings.get("route"))
    limits = AdmissionLimits(**settings["limits"])
    if resolved.router is not None:
        from parallel_rag.studio.router.app import create_router_app

        app, runtime = create_router_app(resolved, limits=limits, langserve_path=settings["path"])
        runtime.warm_up()
        return app
    graphs = build_graphs(resolved.runnable(), base_dir=resolved.base_dir)
    graphs.warm_up()
    return create_app(graphs, path=settings["path"], limits=limits)
