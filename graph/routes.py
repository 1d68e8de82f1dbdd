"""Routes: the ``rag`` plugin as a router in front of a chat model, validated by pydantic.

A router file has ``routing.decisions[]`` (each a route: ``name``, the upstream ``model``, the
matching signals ``description``/``examples``/``keywords`` and ``plugins``), ``routing.default``,
``upstream`` (overridable per decision) and the reranker binding
(``global.model_catalog.deployments`` + ``routing.model_bindings["rag.reranker"]``). A ``rag``
plugin's ``configuration`` is either the single-backend block (``backend``, ``top_k``,
``similarity_threshold``, ``backend_config``, ``rerank: {top_k}``...) or a parallel pipeline
(``retrievers``, ``rewriter``, ``reranker``, ``fusion``); both become a ``RoutePipelineConfig``
that ``build_graph`` compiles. A route pipeline may have a single retriever: the 2..4 rule
belongs to the parallel pipeline, while a single-backend route is the plugin's own shape (its
graph is the same workflow with one branch, so failure policy, timeouts, thresholds, reranking
and evidence records behave exactly as in the parallel pipeline).

The file may also hold the pipeline keys at its top level (``retrievers``...): that pipeline is
what ``parallel-rag ingest`` writes and what the LangServe routes serve.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from parallel_rag.backends.embeddings import BUNDLED, embedding_identity
from parallel_rag.backends.mcp import MCPServerConfig
from parallel_rag.backends.registry import BACKENDS, REFUSED
from parallel_rag.graph.configuration import (
    MAX_RETRIEVERS,
    ConfigError,
    EmbeddingsConfig,
    FailurePolicy,
    FusionConfig,
    PipelineConfig,
    RerankerConfig,
    RewriterConfig,
)
from parallel_rag.graph.loading import parse_config
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

AUTO_MODEL = "auto"
RERANKER_BINDING = "rag.reranker"
RELEVANCE_CONTRACT = "relevance_scores.v1"
DEFAULT_ROUTE_TOP_K = 5
ROUTE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
InjectionMode = Literal["tool_role", "system_prompt"]
_BACKEND_TAGS = {*BACKENDS, *REFUSED, "hybrid"}  # the tags pydantic puts in error paths


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def format_errors(error: ValidationError, prefix: str = "") -> list[str]:
    """``path.to.field: problem`` lines; pydantic's discriminator tags (backend names) and
    union-member names are left out of the path."""
    lines = []
    for problem in error.errors():
        parts: list[str] = [prefix] if prefix else []
        previous: Any = None
        for part in problem["loc"]:
            tag = isinstance(part, str) and (
                (part in _BACKEND_TAGS and (isinstance(previous, int) or previous in _LEGS))
                or part.startswith(("function-", "tagged-union"))
            )
            if not tag:
                parts.append(str(part))
            previous = part
        message = problem["msg"].removeprefix("Value error, ")
        path = ".".join(p for p in parts if p)
        if message.startswith(NESTED_MARK):  # problems found one level down, paths included
            for nested in message[1:].split("; " + NESTED_MARK):
                lines.append(f"{path}.{nested}" if path else nested)
            continue
        lines.append(f"{path}: {message}" if path else message)
    return lines


NESTED_MARK = "@"


def nested_problems(error: ValidationError, prefix: str, *, drop: str | None = None) -> ValueError:
    """A validator's ``ValueError`` carrying a nested validation's problems with their paths
    (``drop`` removes an internal path segment such as ``retrievers.0.``)."""
    lines = format_errors(error, prefix)
    if drop:
        lines = [line.replace(drop, "", 1) for line in lines]
    return ValueError(NESTED_MARK + ("; " + NESTED_MARK).join(lines))


_LEGS = {"primary", "fallback", "backend_config"}


class RouteError(ConfigError):
    """A router configuration problem; the message names the field."""


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


# -- the reranker binding -----------------------------------------------------------------


class DeploymentInput(_Strict):
    max_tokens: int | None = Field(default=None, gt=0)
    overflow: Literal["reject", "truncate"] = "reject"


class Deployment(_Strict):
    """A model in the catalog: ``artifact`` is a local path (relative to the file) or a cached
    Hugging Face name; it runs in this process (``provider: model_runtime``)."""

    artifact: str = Field(min_length=1)
    provider: Literal["model_runtime"] = "model_runtime"
    device: str = "cpu"
    input: DeploymentInput = Field(default_factory=DeploymentInput)


class ModelCatalog(_Strict):
    deployments: dict[str, Deployment] = Field(default_factory=dict)


class GlobalConfig(_Strict):
    model_catalog: ModelCatalog = Field(default_factory=ModelCatalog)


class PairScorerSettings(_Strict):
    """The trained exit of the cross-encoder (0 = the artifact's full depth or width)."""

    layer: int = Field(default=0, ge=0)
    dimension: int = Field(default=0, ge=0)


class RerankerBinding(_Strict):
    deployment: str = Field(min_length=1)
    contract: Literal["relevance_scores.v1"] = RELEVANCE_CONTRACT
    pair_scorer: PairScorerSettings = Field(default_factory=PairScorerSettings)


class RagBindings(_Strict):
    reranker: RerankerBinding | None = None


class ModelBindings(_Strict):
    """``rag.reranker`` (as printed, a dotted key) or nested ``rag: {reranker: ...}``."""

    rag: RagBindings = Field(default_factory=RagBindings)

    @model_validator(mode="before")
    @classmethod
    def _dotted_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and RERANKER_BINDING in data:
            data = dict(data)
            nested = dict(data.get("rag") or {})
            if "reranker" in nested:
                raise ValueError(f"give {RERANKER_BINDING!r} or rag.reranker, not both")
            nested["reranker"] = data.pop(RERANKER_BINDING)
            data["rag"] = nested
        return data


# -- the rag plugin -----------------------------------------------------------------------


class RoutePipelineConfig(PipelineConfig):
    """A route's retrieval pipeline: as ``PipelineConfig``, but one retriever is allowed (the
    single-backend plugin block); 2..4 make it a parallel pipeline. ``decision_name`` is the
    route it serves (an mcp tool's ``${decision_name}``)."""

    decision_name: str | None = None

    @model_validator(mode="after")
    def _check_retrievers(self, info: ValidationInfo) -> RoutePipelineConfig:
        names = [entry.name for entry in self.retrievers]
        if not 1 <= len(names) <= MAX_RETRIEVERS:
            raise ValueError(
                f"retrievers: a route needs 1 to {MAX_RETRIEVERS} enabled retrievers, "
                f"got {len(names)}"
            )
        if len(names) > 1:  # the parallel pipeline's own checks (names, weights, HyDE)
            PipelineConfig.model_validate(
                self.model_dump(exclude_unset=True, exclude={"decision_name"})
            )
        elif set(self.fusion.weights) - set(names):
            unknown = sorted(set(self.fusion.weights) - set(names))
            raise ValueError(f"fusion.weights: unknown retriever name(s) {unknown}")
        elif self.rewriter is not None and self.rewriter.kind == "hyde":
            if not self.retrievers[0].is_dense:
                raise ValueError("rewriter.kind: 'hyde' needs a dense (vector) retriever")
        return self


class RerankOptIn(_Strict):
    """``rerank:`` on a route: rerank with the bound scorer, keeping ``top_k`` (all if unset)."""

    top_k: int | None = Field(default=None, gt=0, le=1000)


_SINGLE_FIELDS = {"backend", "backend_config", "similarity_threshold", "timeout_seconds", "name"}
_PIPELINE_FIELDS = {"retrievers", "rewriter", "reranker", "fusion"}


class RagPluginConfig(_Strict):
    """A ``rag`` plugin ``configuration`` block: the single-backend form as the plugin prints
    it, or a parallel pipeline. ``top_k``: candidates of the single backend (and documents
    injected unless ``rerank.top_k`` says fewer); in the pipeline form, fused documents
    injected. ``on_failure`` governs retrieval, rerank and "no context" alike."""

    enabled: bool = True
    injection_mode: InjectionMode = "tool_role"
    on_failure: FailurePolicy = "warn"
    max_context_length: int = Field(default=10000, gt=0, le=1_000_000)
    top_k: int | None = Field(default=None, gt=0, le=100)
    rerank: RerankOptIn | None = None
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    tenant_field: str = Field(default="tenant", min_length=1)
    # single-backend form
    name: str | None = None
    backend: str | None = None
    backend_config: dict[str, Any] | None = None
    similarity_threshold: float | None = None
    timeout_seconds: float | None = None
    # parallel pipeline form
    retrievers: list[dict[str, Any]] | None = None
    rewriter: RewriterConfig | None = None
    reranker: RerankerConfig | None = None
    fusion: FusionConfig = Field(default_factory=FusionConfig)

    @model_validator(mode="after")
    def _one_form(self) -> RagPluginConfig:
        single = sorted(f for f in _SINGLE_FIELDS if getattr(self, f) is not None)
        if self.retrievers is not None and single:
            raise ValueError(
                f"{NESTED_MARK}{single[0]}: a configuration is either one backend (backend, "
                "backend_config) or a pipeline (retrievers), not both"
            )
        if self.enabled and self.retrievers is None and self.backend is None:
            raise ValueError(f"{NESTED_MARK}backend: required (or a pipeline under retrievers)")
        if self.rerank is not None and self.reranker is not None:
            raise ValueError(f"{NESTED_MARK}rerank: the pipeline's reranker block already reranks")
        return self

    @property
    def is_pipeline(self) -> bool:
        return self.retrievers is not None

    def single_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"backend": self.backend}
        for field in ("name", "backend_config", "similarity_threshold", "timeout_seconds"):
            if getattr(self, field) is not None:
                entry[field] = getattr(self, field)
        if self.top_k is not None:
            entry["top_k"] = self.top_k
        return entry

    def injected_top_k(self) -> int:
        """How many documents reach the prompt."""
        if self.is_pipeline:
            return self.top_k or DEFAULT_ROUTE_TOP_K
        if self.rerank is not None and self.rerank.top_k is not None:
            return min(self.rerank.top_k, self.top_k or self.rerank.top_k)
        return self.top_k or DEFAULT_ROUTE_TOP_K


class Plugin(_Strict):
    type: str
    configuration: dict[str, Any] = Field(default_factory=dict)

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value != "rag":
            raise ValueError(f"plugin type {value!r} is not supported here (only 'rag')")
        return value


class Decision(_Strict):
    """One route. ``model`` is what the upstream is asked for; ``name`` is what a caller may
    put in ``model`` to choose this route."""

    name: str = Field(pattern=ROUTE_NAME)
    model: str = Field(min_length=1)
    description: str = ""
    examples: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    keywords: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
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
            raise ValueError(f"{NESTED_MARK}plugins: at most one rag plugin per decision")
        if rag:
            self._rag_index = self.plugins.index(rag[0])
            try:
                self._rag = RagPluginConfig.model_validate(rag[0].configuration)
            except ValidationError as error:
                raise nested_problems(error, f"plugins.{self._rag_index}.configuration") from None
        return self

    @property
    def rag_index(self) -> int:
        return self._rag_index

    @property
    def rag(self) -> RagPluginConfig | None:
        """The enabled rag plugin, or None (the route forwards untouched)."""
        return self._rag if self._rag is not None and self._rag.enabled else None


class ContextCacheConfig(_Strict):
    """Retrieved context kept per route: an LRU of ``max_entries`` for ``ttl_seconds``."""

    enabled: bool = True
    max_entries: int = Field(default=256, ge=1, le=1_000_000)
    ttl_seconds: float = Field(default=300.0, gt=0)


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
            raise ValueError(f"{NESTED_MARK}decisions: duplicate decision name(s) {duplicates}")
        if self.default is not None and self.default not in names:
            raise ValueError(
                f"{NESTED_MARK}default: {self.default!r} is not a decision (have {names})"
            )
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

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _resolve(self) -> RouterConfig:
        for index, decision in enumerate(self.routing.decisions):
            where = f"routing.decisions.{index}"
            if decision.upstream is None and self.upstream is None:
                raise ValueError(f"{where}.upstream: no upstream here and no top-level upstream")
            upstream = self.upstream_for(decision)
            if upstream.base_url is None:
                raise ValueError(f"{where}.upstream.base_url: required")
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
            "tenant_field": rag.tenant_field,
            "fusion": rag.fusion.model_dump(),
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
            data["reranker"] = self._bound_reranker(rag, where)
        try:
            return RoutePipelineConfig.model_validate(data)
        except ValidationError as error:
            drop = None if rag.is_pipeline else "retrievers.0."
            raise nested_problems(error, where, drop=drop) from None

    def _bound_reranker(self, rag: RagPluginConfig, where: str) -> dict[str, Any]:
        binding = self.routing.model_bindings.rag.reranker
        if binding is None:
            raise ValueError(
                f"{where}.rerank: needs routing.model_bindings['{RERANKER_BINDING}'] "
                "(a deployment with a pair_scorer)"
            )
        deployment = self.global_.model_catalog.deployments.get(binding.deployment)
        if deployment is None:
            raise ValueError(
                f"routing.model_bindings.{RERANKER_BINDING}.deployment: "
                f"{binding.deployment!r} is not in global.model_catalog.deployments"
            )
        reranker = {
            "kind": "cross_encoder",
            "model": deployment.artifact,
            "device": deployment.device,
            "overflow": deployment.input.overflow,
            "layer": binding.pair_scorer.layer,
            "dimension": binding.pair_scorer.dimension,
            "on_failure": rag.on_failure,
        }
        if deployment.input.max_tokens is not None:
            reranker["max_tokens"] = deployment.input.max_tokens
        if rag.rerank is not None and rag.rerank.top_k is not None:
            reranker["top_k"] = rag.rerank.top_k
        return reranker

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

ROUTER_KEYS = {"routing", "upstream", "global"}
SHARED_KEYS = {"mcp_servers"}
"""Top-level keys both the routes and the top-level pipeline read."""


def is_router_data(data: Any) -> bool:
    return isinstance(data, dict) and "routing" in data


def split_router_data(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(router part, top-level pipeline part or None when the file has none)."""
    router = {k: v for k, v in data.items() if k in ROUTER_KEYS | SHARED_KEYS}
    pipeline = {k: v for k, v in data.items() if k not in ROUTER_KEYS}
    return router, (pipeline if set(pipeline) - SHARED_KEYS else None)


def parse_router(data: dict[str, Any], *, source: str = "configuration") -> RouterConfig:
    """Validate the router part of a config; ``RouteError`` names each bad field."""
    if not isinstance(data, dict):
        raise RouteError(f"{source}: the configuration must be a mapping")
    try:
        return RouterConfig.model_validate(data)
    except ValidationError as error:
        lines = "\n".join(f"  {line}" for line in format_errors(error))
        raise RouteError(f"invalid router configuration in {source}:\n{lines}") from None


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    chosen = Path(path)
    if not chosen.is_file():
        raise ConfigError(f"config file not found: {chosen}")
    try:
        data = yaml.safe_load(chosen.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"{chosen}: not valid YAML: {error}") from None
    return data or {}


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
    router = parse_router(router_data, source=str(path))
    pipeline = None
    if pipeline_data is not None:
        pipeline = parse_config(pipeline_data, source=f"{path} (top-level pipeline)")
    return router, pipeline, Path(path).parent.resolve()


# -- what a route reads (cache keys and invalidation) -------------------------------------


def leaf_entries(pipeline: PipelineConfig) -> list[Any]:
    """Every backend entry a pipeline reads, a hybrid's legs included."""
    leaves = []
    for entry in pipeline.retrievers:
        if entry.backend == "hybrid":
            legs = (entry.backend_config.primary, entry.backend_config.fallback)
            leaves.extend(leg for leg in legs if leg is not None)
        else:
            leaves.append(entry)
    return leaves


def _resolve(path: str, base_dir: Path) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else (base_dir / candidate).resolve()


def store_locations(pipeline: PipelineConfig, base_dir: Path) -> list[Path]:
    """Local files or folders an ingest rewrites for this pipeline's indexes (remote servers
    have none: their cached context expires by TTL only)."""
    found: list[Path] = []
    for entry in leaf_entries(pipeline):
        settings = entry.backend_config
        if entry.backend == "bm25":
            found.append(_resolve(settings.index_path, base_dir))
        elif entry.backend == "qdrant" and settings.path:
            found.append(_resolve(settings.path, base_dir) / "collection" / settings.collection)
        elif entry.backend == "milvus" and "://" not in settings.uri:
            found.append(_resolve(settings.uri, base_dir))
        elif entry.backend in ("vectorstore", "qdrant_edge"):
            found.append(settings.store_dir(base_dir) / "CURRENT")
    return list(dict.fromkeys(found))


def store_generation(locations: list[Path]) -> tuple:
    """A fingerprint that changes when an ingest rewrites any of ``locations``: the
    (path, size, mtime) of each file (a folder: of the files in it, recursively)."""
    marks: list[tuple[str, int, int]] = []
    for location in locations:
        try:
            if location.is_dir():
                for item in sorted(location.rglob("*")):
                    if item.is_file() and not item.name.endswith((".lock", ".tmp")):
                        stat = item.stat()
                        marks.append((str(item), stat.st_size, stat.st_mtime_ns))
            elif location.exists():
                stat = location.stat()
                marks.append((str(location), stat.st_size, stat.st_mtime_ns))
            else:
                marks.append((str(location), -1, 0))
        except OSError:
            marks.append((str(location), -2, 0))
    return tuple(marks)


def embedding_name(pipeline: PipelineConfig) -> str:
    return embedding_identity(pipeline.embeddings.model or BUNDLED)


def scorer_name(pipeline: PipelineConfig) -> str | None:
    """The reranker's identity (kind, model, exit, budget), or None without one."""
    reranker = pipeline.reranker
    if reranker is None:
        return None
    model = reranker.model or (reranker.llm.model if reranker.llm else "")
    return (
        f"{reranker.kind}:{model}:layer={reranker.layer}:dim={reranker.dimension}:"
        f"max_tokens={reranker.max_tokens}:top_k={reranker.top_k}"
    )


def retrieval_plan(decision: Decision, pipeline: PipelineConfig | None) -> dict[str, Any]:
    """What retrieval a route would run (no store is opened, nothing is timed)."""
    rag = decision.rag
    if rag is None or pipeline is None:
        return {"retrieval": False}
    branches = []
    for entry in pipeline.retrievers:
        branch: dict[str, Any] = {
            "retriever": entry.name,
            "backend": entry.backend,
            "kind": "dense" if entry.is_dense else "lexical",
            "top_k": entry.top_k,
            "similarity_threshold": entry.similarity_threshold,
            "on_failure": entry.on_failure or pipeline.on_failure,
        }
        if entry.backend == "hybrid":
            settings = entry.backend_config
            branch["primary"] = settings.primary.name
            branch["fallback"] = settings.fallback.name if settings.fallback else None
            branch["strategy"] = settings.strategy
        branches.append(branch)
    rewriter = pipeline.rewriter
    reranker = pipeline.reranker
    return {
        "retrieval": True,
        "form": "pipeline" if rag.is_pipeline else "single_backend",
        "branches": branches,
        "views": (
            {"rewriter": rewriter.kind, "num_queries": rewriter.num_queries}
            if rewriter is not None
            else {"rewriter": None}
        ),
        "rerank": (
            None
            if reranker is None
            else {"kind": reranker.kind, "scorer": scorer_name(pipeline), "top_k": reranker.top_k}
        ),
        "fusion": {"method": "rrf", "k": pipeline.fusion.k, "weights": pipeline.fusion.weights},
        "documents_injected": rag.injected_top_k(),
        "injection_mode": rag.injection_mode,
        "max_context_length": rag.max_context_length,
        "on_failure": rag.on_failure,
        "embedding": embedding_name(pipeline),
    }
