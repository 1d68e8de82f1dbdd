"""What every ``parallel-rag`` command uses: its configuration, through the one resolver, and
a one-line error naming the extra it needs before importing it."""

from __future__ import annotations

import argparse

ROUTE_HELP = (
    "with a router config: run this route's pipeline (default: the top-level pipeline, else "
    "the routing.default route's, else the first route that retrieves)"
)


def resolve_config_of(args: argparse.Namespace):
    """The command's configuration, through the one resolver every command uses."""
    from parallel_rag.studio.config_resolution import resolve_config

    return resolve_config(args.config, route=getattr(args, "route", None))


def require_extra_for(extra: str, command: str) -> None:
    """A one-line error naming the extra ``command`` needs, before importing it."""
    from parallel_rag.backends.extras import require_extra

    require_extra(extra, f"parallel-rag {command}")
