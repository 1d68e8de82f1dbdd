"""The commands that serve the pipeline: ``serve`` (LangServe, with the router's
``/v1/chat/completions`` when the config routes), ``route`` (a routing preview) and ``mcp``
(MCP tools over stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import json
import sys

from parallel_rag.studio.cli.common import require_extra_for, resolve_config_of


def cmd_serve(args: argparse.Namespace) -> int:
    require_extra_for("servers", "serve")
    from parallel_rag.studio.admission import AdmissionLimits
    from parallel_rag.studio.langserve_app import serve

    bounds = {"max_concurrency": args.max_concurrency, "max_queue": args.max_queue}
    bounds = {k: v for k, v in bounds.items() if v is not None}
    limits = AdmissionLimits(**bounds)
    if args.workers < 1:
        raise ValueError(f"--workers: at least 1, got {args.workers}")
    if args.workers > 1:  # several processes on one port (studio/workers.py)
        from parallel_rag.studio.workers import serve_workers

        resolve_config_of(args)  # a bad config fails here, once, not in every worker
        settings = {"config": args.config, "route": args.route, "path": args.path}
        serve_workers(
            {**settings, "limits": bounds}, workers=args.workers, host=args.host, port=args.port
        )
        return 0
    resolved = resolve_config_of(args)
    if resolved.router is not None:  # LangServe plus /v1/chat/completions, one app and gate
        from parallel_rag.studio.router.app import serve_router

        serve_router(resolved, host=args.host, port=args.port, path=args.path, limits=limits)
        return 0
    serve(
        resolved.runnable(),
        base_dir=resolved.base_dir,
        host=args.host,
        port=args.port,
        path=args.path,
        limits=limits,
    )
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    require_extra_for("servers", "route")
    from parallel_rag.studio.router.app import preview_question
    from parallel_rag.studio.router.errors import RouterError

    resolved = resolve_config_of(args)
    if resolved.router is None:
        raise ValueError(f"route: {resolved.source} has no routing section (--config FILE)")
    try:
        preview = preview_question(resolved, args.question, args.model)
    except RouterError as error:
        print(f"parallel-rag: {error.message}", file=sys.stderr)
        return 1
    print(json.dumps(preview, indent=2))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    require_extra_for("mcp", "mcp")
    from parallel_rag.studio.mcp_server import serve as serve_mcp

    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port: must be between 1 and 65535, got {args.port}")
    resolved = resolve_config_of(args)
    serve_mcp(resolved.runnable(), base_dir=resolved.base_dir, http=args.http, port=args.port)
    return 0
