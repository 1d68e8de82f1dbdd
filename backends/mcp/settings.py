"""The ``backend_config`` of an ``mcp`` retriever and the servers the configuration declares
under ``mcp_servers``: pydantic and the standard library only, so the configuration schema holds
them without importing the MCP client (``retriever.py``, which imports the ``mcp`` SDK where it
opens a session)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from parallel_rag.backends.base import RetrievalKind, SettingError
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, field_validator

PLACEHOLDER = re.compile(r"\$\{\s*([A-Za-z_]+)\s*\}")
PLACEHOLDERS = ("user_content", "top_k", "filters", "decision_name")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class StdioServer(_Strict):
    """A server started as a subprocess and spoken to over its stdin/stdout. ``env`` is merged
    over the SDK's minimal default environment; a relative ``cwd`` starts at the config file."""

    transport: Literal["stdio"]
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    connect_timeout_seconds: float = Field(default=30.0, gt=0, le=600)


HeaderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,64}$")]


class StreamableHTTPServer(_Strict):
    """A server reached over streamable HTTP; ``headers`` values are secrets (redacted)."""

    transport: Literal["streamable_http"]
    url: str = Field(pattern=r"^https?://[^\s/]+", description="http:// or https:// URL")
    headers: dict[HeaderName, SecretStr] = Field(default_factory=dict)
    connect_timeout_seconds: float = Field(default=30.0, gt=0, le=600)


MCPServerConfig = Annotated[StdioServer | StreamableHTTPServer, Field(discriminator="transport")]
"""One entry of the top-level ``mcp_servers`` mapping."""


class MCPSettings(BaseModel):
    """``backend_config`` of an ``mcp`` retriever."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    server_name: str = Field(min_length=1, description="a key of the top-level mcp_servers")
    tool_name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(
        default_factory=lambda: {"query": "${user_content}"},
        description="the tool's arguments; ${user_content} ${top_k} ${filters} ${decision_name}",
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=600, description="per tool call")
    max_response_bytes: int | None = Field(
        default=None, ge=0, description="tool result cap; omitted or 0 = 4 MiB"
    )
    results_path: str = "results"
    id_field: str = Field(default="id", min_length=1)
    content_field: str = Field(default="content", min_length=1)
    score_field: str | None = "score"
    metadata_field: str | None = "metadata"
    retrieval_kind: RetrievalKind = "lexical"

    @field_validator("arguments")
    @classmethod
    def _template(cls, value: dict[str, Any]) -> dict[str, Any]:
        names = set(placeholders_in(value))
        unknown = sorted(names - set(PLACEHOLDERS))
        if unknown:
            raise ValueError(f"unknown placeholder(s) {unknown}; known: {list(PLACEHOLDERS)}")
        if "user_content" not in names:
            raise ValueError("must contain the ${user_content} placeholder (the query)")
        return value

    @property
    def cap(self) -> int:
        from parallel_rag.backends.shared.json_http import DEFAULT_MAX_RESPONSE_BYTES

        return self.max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES

    @property
    def takes_filters(self) -> bool:
        return "filters" in placeholders_in(self.arguments)


def placeholders_in(value: Any) -> list[str]:
    """Every placeholder name used anywhere in a template (keys are not templated)."""
    if isinstance(value, str):
        return PLACEHOLDER.findall(value)
    if isinstance(value, Mapping):
        return [name for item in value.values() for name in placeholders_in(item)]
    if isinstance(value, list | tuple):
        return [name for item in value for name in placeholders_in(item)]
    return []


def declared_server(settings: MCPSettings, pipeline: Any) -> MCPServerConfig:
    """The server ``server_name`` names under the configuration's ``mcp_servers``;
    ``SettingError`` on ``server_name`` when there is none."""
    servers = getattr(pipeline, "mcp_servers", None) or {}
    server = servers.get(settings.server_name)
    if server is None:
        raise SettingError(
            "server_name",
            f"no MCP server '{settings.server_name}' under mcp_servers "
            f"(declared: {sorted(servers)})",
        )
    return server
