"""Which configuration a command runs: the one function every ``parallel-rag`` command
(``ask``, ``route``, ``serve``, ``mcp``, ``eval``, ``ingest``) resolves its ``--config`` with, so
any command accepts any config file, a router file included.

The file is the argument, else ``$PARALLEL_RAG_CONFIG``, else ./parallel-rag.yaml, else the
embedded defaults (``graph/loading.py``). A file with a ``routing`` section is a router file
(``studio/router/configuration.py``); the pipeline a command runs on it is, in this order:
the route ``--route NAME`` names; the file's top-level pipeline (what ``ingest`` writes and
LangServe serves under ``/rag``); the ``routing.default`` route's pipeline when it retrieves;
the first route that retrieves. A plain pipeline file is that pipeline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from parallel_rag.graph.configuration import ConfigError, PipelineConfig
from parallel_rag.graph.loading import config_path, load_config
from parallel_rag.studio.router.configuration import RouterConfig, is_router_file, load_router


@dataclass(frozen=True)
class ResolvedConfig:
    """A config file resolved for a command: the pipeline it runs (None for a router file whose
    routes all forward untouched), the directory relative paths start from, and for a router
    file its routes and which route's pipeline ``pipeline`` is (None: the top-level one)."""

    pipeline: PipelineConfig | None
    base_dir: Path
    source: str
    router: RouterConfig | None = None
    route: str | None = None

    def runnable(self) -> PipelineConfig:
        """The pipeline to run; a ``ConfigError`` saying why when there is none."""
        if self.pipeline is None:
            raise ConfigError(
                f"{self.source}: nothing to retrieve with: no top-level pipeline (retrievers) "
                "and no route with an enabled rag plugin"
            )
        return self.pipeline


def resolve_config(
    config: str | os.PathLike | None = None, *, route: str | None = None
) -> ResolvedConfig:
    """The configuration a command runs (see the module docstring); ``route`` is the command's
    ``--route NAME``, refused for a file without routes."""
    chosen = config_path(config)
    if chosen is None or not is_router_file(chosen):
        if route is not None:
            where = chosen or "the embedded defaults"
            raise ConfigError(f"--route: {where} has no routing section (routing.decisions)")
        pipeline, base_dir = load_config(chosen)
        return ResolvedConfig(pipeline, base_dir, str(chosen or "the embedded defaults"))
    router, top_level, base_dir = load_router(chosen)
    source = str(chosen)
    name = _chosen_route(router, top_level, source, route)
    pipeline = top_level if name is None else router.pipeline_for(name)
    return ResolvedConfig(pipeline, base_dir, source, router=router, route=name)


def _chosen_route(
    router: RouterConfig, top_level: PipelineConfig | None, source: str, route: str | None
) -> str | None:
    """The route whose pipeline a command runs on a router file; None for the top-level
    pipeline (or when no route retrieves)."""
    names = list(router.decisions)
    if route is not None:
        if route not in router.decisions:
            raise ConfigError(f"--route: {route!r} is not a route in {source} (routes: {names})")
        if router.pipeline_for(route) is None:
            raise ConfigError(
                f"--route: route {route!r} in {source} retrieves nothing (no enabled rag plugin)"
            )
        return route
    if top_level is not None:
        return None
    default = router.routing.default
    candidates = ([default] if default is not None else []) + names
    return next((name for name in candidates if router.pipeline_for(name) is not None), None)
