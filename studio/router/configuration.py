"""The router's configuration: the schema of a router file and its loading.

A router file has ``routing.decisions[]`` (each a route: ``name``, the upstream ``model``, the
matching signals ``description``/``examples``/``keywords`` and ``plugins``), ``routing.default``,
``upstream`` (overridable per decision) and the reranker binding (``global.model_catalog`` +
``routing.model_bindings["rag.reranker"]``, ``bindings.py``). A route's ``rag`` plugin
(``plugin.py``) becomes the ``RoutePipelineConfig`` its graph is compiled from.

The file may also hold the pipeline keys at its top level (``retrievers``...): that pipeline is
what ``parallel-rag ingest`` writes and what the LangServe routes serve.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from parallel_rag.backends.mcp.settings import MCPServerConfig
from parallel_rag.graph.configuration import ConfigError, EmbeddingsConfig, PipelineConfig
from parallel_rag.graph.errors import FieldError
from parallel_rag.graph.loading import parse_config, read_yaml
from parallel_rag.studio.router.bindings import GlobalConfig, ModelBindings, bound_reranker
from parallel_rag.studio.router.errors import (
    RouteError,
    nested_problems,
    route_error,
)
from parallel_rag.studio.router.plugin import Plugin, RagPluginConfig, RoutePipelineConfig
from parallel_rag.studio.router.semantic_router_compat import (
    UPSTREAM_TOP_KEYS,
    translate_router_data,
)
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

AUTO_MODEL = "auto"
ROUTE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- upstream -----------------------------------------------------------------------------


class UpstreamTimeouts(_Strict):
    """Seconds, as httpx counts them: ``read`` bounds the wait for each chunk of the answer."""

    connect: float = Field(default=5.0, gt=0, le=600)
    read: float = Field(default=120.0, gt=0, le=3600)
    write: float = Field(default=30.0, gt=0, le=600)
    pool: float = Field(default=10.0, gt=0, le=600)


class UpstreamOverride(_Strict):
    """Per-decision upstream fields; unset ones come from the top-level ``upstream``."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeouts: UpstreamTimeouts | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_key_source(self) -> UpstreamOverride:
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("give api_key or api_key_env, not both")
        return self


class UpstreamConfig(UpstreamOverride):
    """The OpenAI-compatible server the router forwards to (``base_url`` ends in ``/v1``)."""

    def merged(self, override: UpstreamOverride | None) -> UpstreamConfig:
        if override is None:
            return self
        data = self.model_dump()
        given = override.model_dump(exclude_unset=True)
        if "api_key" in given or "api_key_env" in given:
            data.update(api_key=None, api_key_env=None)
        data.update({k: getattr(override, k) for k in given})
        return UpstreamConfig.model_validate(data)

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or None
        return None

    @property
    def timeout_settings(self) -> UpstreamTimeouts:
        return self.timeouts or UpstreamTimeouts()


# -- routes -------------------------------------------------------------------------------


class Decision(_Strict):
    """One route. ``model`` is what the upstream is asked for; ``name`` is what a caller may
    put in ``model`` to choose this route."""

    name: str = Field(pattern=ROUTE_NAME)
    model: str = Field(min_length=1)
    description: str = ""
    examples: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    keywords: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    similarity_threshold: float | None = Field(
        default=None, ge=-1, le=1, description="this route's own auto threshold (else routing's)"
    )
    match_description: bool = Field(
        default=True, description="false: the description documents the route, never matches"
    )
    upstream: UpstreamOverride | None = None
    plugins: list[Plugin] = Field(default_factory=list)
    _rag: RagPluginConfig | None = PrivateAttr(default=None)
    _rag_index: int = PrivateAttr(default=0)

    @field_validator("name")
    @classmethod
    def _not_auto(cls, value: str) -> str:
        if value == AUTO_MODEL:
            raise ValueError(f"{AUTO_MODEL!r} is reserved for automatic routing")
        return value

    @model_validator(mode="after")
    def _one_rag(self) -> Decision:
        rag = [p for p in self.plugins if p.type == "rag"]
        if len(rag) > 1:
            raise FieldError("plugins", "at most one rag plugin per decision")
        if rag:
            self._rag_index = self.plugins.index(rag[0])
            try:
                self._rag = RagPluginConfig.model_validate(rag[0].configuration)
            except ValidationError as error:
                where = f"plugins.{self._rag_index}.configuration"
                raise nested_problems(error, where, rag[0].configuration) from None
        return self

    @property
    def rag_index(self) -> int:
        return self._rag_index

    @property
    def rag(self) -> RagPluginConfig | None:
        """The enabled rag plugin, or None (the route forwards untouched)."""
        return self._rag if self._rag is not None and self._rag.enabled else None


class ContextCacheConfig(_Strict):
    """Retrieved context kept per route: an LRU of ``max_entries`` for ``ttl_seconds``, in this
    process (``backend: memory``) or in Redis (``backend: redis``), shared by every replica
    using the same Redis ``url`` and ``namespace`` (``studio/router/cache.py``)."""

    enabled: bool = True
    max_entries: int = Field(default=256, ge=1, le=1_000_000)
    ttl_seconds: float = Field(default=300.0, gt=0)
    backend: Literal["memory", "redis"] = "memory"
    url: SecretStr | None = Field(default=None, description="redis://[user:password@]host:port/db")
    url_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    namespace: str = Field(default="parallel-rag", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    timeout_seconds: float = Field(
        default=0.1, gt=0, le=10, description="Redis slower than this counts as down"
    )
    retry_seconds: float = Field(
        default=1.0, ge=0, le=300, description="after a failure, Redis is left alone this long"
    )

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.match(r"^rediss?://", value.get_secret_value()):
            raise ValueError("must be a redis:// or rediss:// URL")
        return value

    @model_validator(mode="after")
    def _redis_needs_an_address(self) -> ContextCacheConfig:
        if self.backend == "redis":
            if (self.url is None) == (self.url_env is None):
                raise ValueError("backend: redis needs url or url_env (one of them)")
        elif self.url is not None or self.url_env is not None:
            raise ValueError("url/url_env: only with backend: redis")
        return self

    def redis_url(self) -> str:
        """The Redis URL (``url``, or the environment variable ``url_env`` names)."""
        if self.url is not None:
            return self.url.get_secret_value()
        value = os.environ.get(self.url_env or "")
        if not value:
            raise ConfigError(f"routing.context_cache.url_env: ${self.url_env} is not set")
        return value


class RoutingConfig(_Strict):
    decisions: list[Decision] = Field(min_length=1)
    default: str | None = None
    similarity_threshold: float = Field(
        default=0.45,
        ge=-1,
        le=1,
        description="auto: cosine (packaged MiniLM) a route's description/examples must reach",
    )
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    model_bindings: ModelBindings = Field(default_factory=ModelBindings)
    context_cache: ContextCacheConfig = Field(default_factory=ContextCacheConfig)

    @model_validator(mode="after")
    def _names(self) -> RoutingConfig:
        names = [d.name for d in self.decisions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise FieldError("decisions", f"duplicate decision name(s) {duplicates}")
        if self.default is not None and self.default not in names:
            raise FieldError("default", f"{self.default!r} is not a decision (have {names})")
        return self


class RouterConfig(_Strict):
    """The router part of a config file (the top-level pipeline keys are split off first)."""

    routing: RoutingConfig
    upstream: UpstreamConfig | None = None
    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    mcp_servers: dict[str, MCPServerConfig] = Field(
        default_factory=dict, description="MCP servers the routes' mcp retrievers name"
    )
    _pipelines: dict[str, RoutePipelineConfig] = PrivateAttr(default_factory=dict)
    _warnings: list[str] = PrivateAttr(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def warnings(self) -> list[str]:
        """What the file says that this router does not do (a vLLM Semantic Router field
        with no counterpart, a store block that opens a local store...): listed at start-up."""
        return list(self._warnings)

    @model_validator(mode="after")
    def _resolve(self) -> RouterConfig:
        for index, decision in enumerate(self.routing.decisions):
            where = f"routing.decisions.{index}"
            if decision.upstream is None and self.upstream is None:
                raise FieldError(f"{where}.upstream", "no upstream here and no top-level upstream")
            upstream = self.upstream_for(decision)
            if upstream.base_url is None:
                raise FieldError(f"{where}.upstream.base_url", "required")
            rag = decision.rag
            if rag is not None:
                plugin = f"{where}.plugins.{decision.rag_index}.configuration"
                self._pipelines[decision.name] = self._pipeline(rag, plugin, decision.name)
        return self

    def _pipeline(self, rag: RagPluginConfig, where: str, name: str) -> RoutePipelineConfig:
        data: dict[str, Any] = {
            "decision_name": name,
            "mcp_servers": self.mcp_servers,
            "on_failure": rag.on_failure,
            "embeddings": rag.embeddings.model_dump(),
            "fusion": rag.fusion.model_dump(exclude_unset=True),
            "tenant_field": rag.tenant_field,
            "conversation": rag.conversation.model_dump(exclude_unset=True),
        }
        if rag.is_pipeline:
            data["retrievers"] = rag.retrievers
            if rag.rewriter is not None:
                data["rewriter"] = rag.rewriter.model_dump(exclude_unset=True)
            if rag.reranker is not None:
                data["reranker"] = rag.reranker.model_dump(exclude_unset=True)
        else:
            data["retrievers"] = [rag.single_entry()]
        if rag.rerank is not None:
            data["reranker"] = bound_reranker(
                self.routing.model_bindings,
                self.global_.model_catalog,
                where=where,
                on_failure=rag.on_failure,
                top_k=rag.rerank.top_k,
                max_candidates=rag.rerank_budget(),
            )
        try:
            return RoutePipelineConfig.model_validate(data)
        except ValidationError as error:
            drop = None if rag.is_pipeline else "retrievers.0."
            raise nested_problems(error, where, data, drop=drop) from None

    # -- lookups ---------------------------------------------------------------------------

    @property
    def decisions(self) -> dict[str, Decision]:
        return {d.name: d for d in self.routing.decisions}

    def upstream_for(self, decision: Decision) -> UpstreamConfig:
        base = self.upstream or UpstreamConfig()
        return base.merged(decision.upstream)

    def pipeline_for(self, name: str) -> RoutePipelineConfig | None:
        """The route's retrieval pipeline; None for a route that forwards untouched."""
        return self._pipelines.get(name)


# -- the file ------------------------------------------------------------------------------

ROUTER_KEYS = {"routing", "upstream", "global", *UPSTREAM_TOP_KEYS}
SHARED_KEYS = {"mcp_servers"}
"""Top-level keys both the routes and the top-level pipeline read."""


def is_router_data(data: Any) -> bool:
    return isinstance(data, dict) and "routing" in data


def split_router_data(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(router part, top-level pipeline part or None when the file has none)."""
    router = {k: v for k, v in data.items() if k in ROUTER_KEYS | SHARED_KEYS}
    pipeline = {k: v for k, v in data.items() if k not in ROUTER_KEYS}
    return router, (pipeline if set(pipeline) - SHARED_KEYS else None)


def parse_router(
    data: dict[str, Any], *, source: str = "configuration", base_dir: Path | None = None
) -> RouterConfig:
    """Validate the router part of a config (vLLM Semantic Router's shapes mapped onto ours
    first: ``semantic_router_compat``); ``RouteError`` names each bad field, and
    ``RouterConfig.warnings`` lists what could not map. ``base_dir`` is where relative store
    paths start (named in those warnings)."""
    if not isinstance(data, dict):
        raise RouteError(f"{source}: the configuration must be a mapping")
    try:
        translated, warnings = translate_router_data(data, base_dir)
    except ConfigError as error:
        raise RouteError(f"invalid router configuration in {source}: {error}") from None
    try:
        config = RouterConfig.model_validate(translated)
    except ValidationError as error:
        raise route_error(error, source, translated) from None
    config._warnings = warnings
    return config


def is_router_file(path: str | os.PathLike | None) -> bool:
    if path is None or not Path(path).is_file():
        return False
    try:
        return is_router_data(read_yaml(path))
    except ConfigError:
        return False


def load_router(
    path: str | os.PathLike,
) -> tuple[RouterConfig, PipelineConfig | None, Path]:
    """A router file: its routes, its top-level pipeline (None when it has none) and the
    directory relative paths start from."""
    data = read_yaml(path)
    if not is_router_data(data):
        raise RouteError(f"{path}: no routing section (routing.decisions)")
    router_data, pipeline_data = split_router_data(data)
    base_dir = Path(path).parent.resolve()
    router = parse_router(router_data, source=str(path), base_dir=base_dir)
    pipeline = None
    if pipeline_data is not None:
        pipeline = parse_config(pipeline_data, source=f"{path} (top-level pipeline)")
    return router, pipeline, base_dir
