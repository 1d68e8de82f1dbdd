"""``mcp``: retrieval through a tool of an MCP server declared under the configuration's
``mcp_servers``. Needs the ``mcp`` extra (``pip install 'parallel-rag[mcp]'``).

``settings.py`` holds the ``backend_config`` model and the server declarations the
configuration schema composes; ``retriever.py`` the retriever, over the MCP client's parts:
``connection.py`` (one server's session), ``sessions.py`` (every session, on a private
event-loop thread), ``transport.py`` (capped readers), ``mapping.py`` (the arguments template and
the result as documents) and ``errors.py``. This package's ``BACKEND`` is what the registry
imports: the settings and a factory that imports ``retriever.py`` only when a configuration
builds an ``mcp`` branch.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendSpec, BuildRequest
from parallel_rag.backends.mcp.settings import MCPSettings, declared_server


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.mcp.retriever import build_mcp

    return build_mcp(request)


BACKEND = BackendSpec(
    name="mcp",
    settings=MCPSettings,
    factory=build_retriever,
    kind=lambda settings: settings.retrieval_kind,
    check=declared_server,
    extra="mcp",
)
