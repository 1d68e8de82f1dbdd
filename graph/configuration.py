"""The pipeline configuration: one YAML file validated by pydantic, errors naming the field.

A retriever entry takes the seed ``rag`` plugin's fields unchanged (``backend``, ``top_k``,
``similarity_threshold``, ``on_failure``, ``backend_config``, plus ``enabled`` and
``injection_mode``), so a plugin ``configuration`` block can be pasted in. Each backend owns the
model of its ``backend_config``; this module composes them, discriminated on ``backend``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from parallel_rag.backends.bm25 import BM25Settings
from parallel_rag.nodes.failure_policy import FailurePolicy
from parallel_rag.nodes.chat_models import (
    ChatModelSettings,
    normalize_base_url,
    served_model_name,
)
from parallel_rag.backends.embeddings import BUNDLED
from parallel_rag.backends.external_api import ExternalAPISettings
from parallel_rag.backends.hybrid import HybridOptions
from parallel_rag.nodes.rerank.listwise import validate_ranking_prompt
from parallel_rag.backends.milvus import MilvusSettings
from parallel_rag.backends.openai_file_search import OpenAIFileSearchSettings
from parallel_rag.backends.qdrant import QdrantSettings
from parallel_rag.nodes.rewrite.rewriters import validate_prompt
from parallel_rag.backends.vectorstore import VectorStoreSettings
from parallel_rag.nodes.fuse import DEFAULT_FUSION_K, DEFAULT_FUSION_METHOD, FusionMethod
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

DEFAULT_CONFIG_FILE = "parallel-rag.yaml"
CONFIG_ENV = "PARALLEL_RAG_CONFIG"
DENSE_BACKENDS = {"qdrant", "milvus", "openai", "vectorstore"}
MIN_RETRIEVERS, MAX_RETRIEVERS = 2, 4
DEFAULT_RERANK_CANDIDATES = 20


class ConfigError(ValueError):
    """A configuration problem found at load time; the message names the bad field or file."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrieverEntry(_Strict):
    """Fields every retriever entry shares (the seed plugin's, plus a branch name)."""

    name: str = Field(default="", pattern=r"^$|^[A-Za-z0-9_.-]{1,40}$")
    enabled: bool = True
    top_k: int | None = Field(default=None, gt=0, le=1000)
    similarity_threshold: float | None = Field(default=None, ge=0, le=1)
    on_failure: FailurePolicy | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    injection_mode: Literal["tool_role", "system_prompt"] | None = Field(
        default=None, description="accepted for seed compatibility; set it on the generator"
    )

    @model_validator(mode="after")
    def _default_name(self) -> RetrieverEntry:
        if not self.name:
            self.name = self.backend  # type: ignore[attr-defined]
        return self

    @property
    def is_dense(self) -> bool:
        return self.backend in DENSE_BACKENDS  # type: ignore[attr-defined]


class BM25Entry(RetrieverEntry):
    backend: Literal["bm25"]
    backend_config: BM25Settings = Field(default_factory=BM25Settings)

    @field_validator("similarity_threshold")
    @classmethod
    def _no_threshold(cls, value: float | None) -> float | None:
        if value is not None:
            raise ValueError(
                "does not apply to bm25: BM25 scores are unbounded and not a similarity"
            )
        return value


class QdrantEntry(RetrieverEntry):
    backend: Literal["qdrant"]
    backend_config: QdrantSettings = Field(default_factory=QdrantSettings)


class MilvusEntry(RetrieverEntry):
    backend: Literal["milvus"]
    backend_config: MilvusSettings


class ExternalAPIEntry(RetrieverEntry):
    """Dense or lexical by ``request_format`` (see ``backends/external_api.py``)."""

    backend: Literal["external_api"]
    backend_config: ExternalAPISettings

    @model_validator(mode="after")
    def _threshold_applies(self) -> ExternalAPIEntry:
        settings = self.backend_config
        if self.similarity_threshold is not None and not settings.has_comparable_similarity:
            raise ValueError(
                f"similarity_threshold: does not apply to request_format "
                f"'{settings.request_format}' (search: {settings.search}): its scores are "
                "BM25 scores, not a similarity"
            )
        return self

    @property
    def is_dense(self) -> bool:
        return self.backend_config.kind == "dense"


class OpenAIEntry(RetrieverEntry):
    backend: Literal["openai"]
    backend_config: OpenAIFileSearchSettings


class VectorStoreEntry(RetrieverEntry):
    backend: Literal["vectorstore"]
    backend_config: VectorStoreSettings


class MCPEntry(RetrieverEntry):
    """Refused at load time, like the seed plugin, until an MCP tool invoker exists."""

    backend: Literal["mcp"]
    backend_config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _refuse(cls, data: Any) -> Any:
        raise ValueError(
            "backend 'mcp' is not supported: no MCP tool invoker exists yet "
            "(use external_api for an HTTP search service)"
        )


BackendEntry = Annotated[
    BM25Entry
    | QdrantEntry
    | MilvusEntry
    | ExternalAPIEntry
    | OpenAIEntry
    | VectorStoreEntry
    | MCPEntry,
    Field(discriminator="backend"),
]
"""A backend a ``hybrid`` may use as its primary or fallback (anything but another hybrid)."""


NESTED_BACKENDS = {"bm25", "qdrant", "milvus", "external_api", "openai", "vectorstore", "mcp"}


class HybridSettings(HybridOptions):
    """``backend_config`` of a ``hybrid``: its strategy (owned by ``backends/hybrid.py``) plus
    a primary and an optional fallback, each a full backend entry."""

    primary: BackendEntry
    fallback: BackendEntry | None = None

    @field_validator("primary", "fallback", mode="before")
    @classmethod
    def _no_nested_hybrid(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("backend") == "hybrid":
            raise ValueError("a hybrid may not nest a hybrid")
        return value

    @model_validator(mode="after")
    def _distinct_names(self) -> HybridSettings:
        if self.fallback is not None and self.fallback.name == self.primary.name:
            name = self.primary.name
            self.primary.name, self.fallback.name = f"{name}-primary", f"{name}-fallback"
        return self


class HybridEntry(RetrieverEntry):
    """A primary backend with an optional fallback; dense when its primary is."""

    backend: Literal["hybrid"]
    backend_config: HybridSettings

    @property
    def is_dense(self) -> bool:
        return self.backend_config.primary.is_dense


AnyRetrieverEntry = Annotated[
    BM25Entry
    | QdrantEntry
    | MilvusEntry
    | ExternalAPIEntry
    | OpenAIEntry
    | VectorStoreEntry
    | HybridEntry
    | MCPEntry,
    Field(discriminator="backend"),
]


class RewriterConfig(_Strict):
    """Query rewriting with a chat model (README "LLM rewriting and generation")."""

    kind: Literal["multi_query", "decompose", "hyde"] = "multi_query"
    num_queries: int = Field(default=3, ge=1, le=8)
    include_original: bool = True
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0, le=4096)
    on_failure: FailurePolicy | None = None
    prompt: str | None = Field(
        default=None, description="replaces the kind's prompt; placeholders {query}, {num_queries}"
    )
    llm: ChatModelSettings | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_formats(cls, value: str | None) -> str | None:
        return None if value is None else validate_prompt(value)


class RerankerConfig(_Strict):
    """Per-branch reranking against the original query (optional; README "Reranking").

    ``embedding`` re-scores by cosine similarity under the embedding model (the packaged
    all-MiniLM-L6-v2 unless ``model`` says otherwise); ``cross_encoder`` needs ``model``, a local
    path (relative to the config file) or a cached Hugging Face name. ``max_candidates`` is the
    explicit CPU budget: only a branch's first N hits are scored, the rest follow unscored.
    ``layer``/``dimension`` (0 = full) pick a trained exit of a cross-encoder. ``llm`` ranks
    listwise with the chat model ``llm`` in windows of ``window_size`` by ``window_step``,
    reading each passage's first ``passage_chars`` characters.
    """

    kind: Literal["embedding", "cross_encoder", "llm"] = "embedding"
    model: str | None = Field(default=None, validate_default=True)
    llm: ChatModelSettings | None = Field(
        default=None, description="kind llm: the chat model that ranks (or build_graph's model)"
    )
    window_size: int = Field(default=20, ge=2, le=100, description="kind llm: passages per call")
    window_step: int = Field(default=10, ge=1, le=100, description="kind llm: window stride")
    passage_chars: int = Field(
        default=500, gt=0, description="kind llm: characters of each passage the model reads"
    )
    prompt: str | None = Field(
        default=None,
        description="kind llm: replaces prompts.LISTWISE_RERANK_PROMPT; placeholders {query}, "
        "{count}, {passages}",
    )
    device: str = "cpu"
    top_k: int | None = Field(default=None, gt=0)
    max_candidates: int = Field(default=DEFAULT_RERANK_CANDIDATES, gt=0, le=1000)
    max_tokens: int | None = Field(default=None, gt=0)
    overflow: Literal["reject", "truncate"] = "reject"
    batch_size: int = Field(default=32, gt=0, le=1024)
    layer: int = Field(default=0, ge=0)
    dimension: int = Field(default=0, ge=0)
    on_failure: FailurePolicy | None = None

    @field_validator("model")
    @classmethod
    def _model_for_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("kind") == "llm":
            if value:
                raise ValueError("kind 'llm' ranks with reranker.llm (a chat model), not a model")
            return None
        if info.data.get("kind") == "cross_encoder":
            if not value or value == BUNDLED:
                raise ValueError(
                    "kind 'cross_encoder' needs a model: a local path or a cached Hugging Face "
                    "name (no cross-encoder weights ship with parallel-rag)"
                )
            return value
        return value or BUNDLED

    @field_validator("layer", "dimension")
    @classmethod
    def _exit_for_cross_encoder(cls, value: int, info: ValidationInfo) -> int:
        if value and info.data.get("kind") != "cross_encoder":
            raise ValueError("selects a cross-encoder exit: only for kind 'cross_encoder'")
        return value

    @field_validator("prompt")
    @classmethod
    def _ranking_prompt(cls, value: str | None) -> str | None:
        return None if value is None else validate_ranking_prompt(value)

    @model_validator(mode="after")
    def _llm_settings_for_llm_only(self) -> RerankerConfig:
        if self.kind != "llm":
            llm_only = {"llm", "window_size", "window_step", "passage_chars", "prompt"}
            changed = self.model_fields_set & llm_only
            if changed:
                field = sorted(changed)[0]
                raise ValueError(f"{field}: only for kind 'llm'")
            return self
        if self.max_tokens is not None:
            raise ValueError(
                "max_tokens: kind 'llm' bounds each passage in characters (passage_chars)"
            )
        if self.window_step > self.window_size:
            raise ValueError("window_step: must not exceed window_size")
        return self

    def relative_to(self, base_dir: Path) -> RerankerConfig:
        """A copy whose ``model`` names the existing path under ``base_dir`` when there is one
        (otherwise the value stays: an absolute path or a Hugging Face name)."""
        if not self.model or self.model == BUNDLED or Path(self.model).expanduser().is_absolute():
            return self
        candidate = base_dir / self.model
        return self.model_copy(update={"model": str(candidate)}) if candidate.exists() else self


class FusionConfig(_Strict):
    method: FusionMethod = Field(
        default=DEFAULT_FUSION_METHOD,
        description="rrf (ranks) or a weighted sum of per-branch normalised scores: "
        "minmax, zscore, dbsf (mean +- 3 std)",
    )
    k: int = Field(
        default=DEFAULT_FUSION_K,
        gt=0,
        description="RRF constant; for score methods, the rank offset of pseudo-scores "
        "given to a branch without usable scores",
    )
    weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)


class GeneratorConfig(_Strict):
    kind: Literal["extractive", "llm"] = "extractive"
    max_sentences: int = Field(default=3, ge=1, le=20)
    min_similarity: float | None = Field(
        default=0.3,
        ge=-1,
        le=1,
        description="extractive: embedding cosine a sentence needs to count as evidence "
        "(tuned for all-MiniLM-L6-v2); null = lexical matching only",
    )
    sentence_cache_size: int = Field(
        default=20_000,
        ge=0,
        description="extractive: sentence vectors kept between requests (LRU); 0 = none",
    )
    llm: ChatModelSettings | None = None
    injection_mode: Literal["tool_role", "system_prompt"] = "tool_role"
    max_context_length: int = Field(default=10000, gt=0)
    system_prompt: str | None = Field(
        default=None, description="replaces prompts.GENERATOR_SYSTEM_PROMPT (kind llm)"
    )
    on_failure: FailurePolicy | None = Field(
        default=None, description="when the chat model fails; default: the pipeline's policy"
    )


class EmbeddingsConfig(_Strict):
    model: str = BUNDLED
    device: str = "cpu"


class PipelineConfig(_Strict):
    """The whole workflow. Retriever objects passed in code count toward the 2..4 limit
    (give their names as validation context ``extra_retrievers``)."""

    retrievers: list[AnyRetrieverEntry] = Field(default_factory=list)
    rewriter: RewriterConfig | None = None
    reranker: RerankerConfig | None = None
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    on_failure: FailurePolicy = "warn"
    tenant_field: str = Field(default="tenant", min_length=1)

    @field_validator("retrievers", mode="after")
    @classmethod
    def _enabled_only(cls, entries: list[RetrieverEntry]) -> list[RetrieverEntry]:
        return [entry for entry in entries if entry.enabled]

    @model_validator(mode="after")
    def _check_retrievers(self, info: ValidationInfo) -> PipelineConfig:
        extra = list((info.context or {}).get("extra_retrievers", []))
        names = [entry.name for entry in self.retrievers] + extra
        if not MIN_RETRIEVERS <= len(names) <= MAX_RETRIEVERS:
            raise ValueError(
                f"retrievers: needs {MIN_RETRIEVERS} to {MAX_RETRIEVERS} enabled retrievers, "
                f"got {len(names)}"
            )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"retrievers: duplicate retriever name(s) {duplicates}")
        unknown = sorted(set(self.fusion.weights) - set(names))
        if unknown:
            raise ValueError(f"fusion.weights: unknown retriever name(s) {unknown}")
        dense_extra = (info.context or {}).get("extra_dense", [])
        if (
            self.rewriter is not None
            and self.rewriter.kind == "hyde"
            and not any(e.is_dense for e in self.retrievers)
            and not dense_extra
        ):
            raise ValueError(
                "rewriter.kind: 'hyde' needs at least one dense (vector) retriever, "
                "and every configured retriever is lexical"
            )
        return self


def default_config_dict() -> dict[str, Any]:
    """The embedded defaults: BM25 plus Qdrant local mode on the packaged MiniLM embeddings."""
    return {
        "retrievers": [
            {"name": "lexical", "backend": "bm25"},
            {"name": "dense", "backend": "qdrant"},
        ]
    }


def format_validation_error(error: ValidationError, source: str) -> str:
    """One line per problem: dotted path of the bad field, then what is wrong."""
    lines = [f"invalid configuration in {source}:"]
    for problem in error.errors():
        loc = list(problem["loc"])
        if len(loc) > 2 and loc[0] == "retrievers" and isinstance(loc[1], int):
            del loc[2]  # the discriminator tag (backend name) pydantic inserts
            if loc[2:4] in (["backend_config", "primary"], ["backend_config", "fallback"]):
                if len(loc) > 4 and loc[4] in NESTED_BACKENDS:
                    del loc[4]  # the same tag on a hybrid's leg
        message = problem["msg"].removeprefix("Value error, ")
        path = ".".join(str(part) for part in loc)
        lines.append(f"  {path}: {message}" if path else f"  {message}")
    return "\n".join(lines)


def parse_config(
    data: dict[str, Any] | PipelineConfig,
    *,
    source: str = "configuration",
    extra_retrievers: list[str] | None = None,
    extra_dense: list[str] | None = None,
) -> PipelineConfig:
    """Validate a config mapping; raise ``ConfigError`` naming each bad field."""
    if isinstance(data, PipelineConfig):
        data = data.model_dump(exclude_unset=True)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the configuration must be a mapping, got {type(data).__name__}"
        )
    try:
        return PipelineConfig.model_validate(
            data,
            context={
                "extra_retrievers": extra_retrievers or [],
                "extra_dense": extra_dense or [],
            },
        )
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source)) from None


def config_path(path: str | os.PathLike | None = None) -> Path | None:
    """The config file to use: the argument, ``$PARALLEL_RAG_CONFIG``, or ./parallel-rag.yaml."""
    if path is not None:
        return Path(path)
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None


def load_config(
    path: str | os.PathLike | None = None,
    *,
    extra_retrievers: list[str] | None = None,
    extra_dense: list[str] | None = None,
) -> tuple[PipelineConfig, Path]:
    """Load and validate a YAML config; returns it with the directory relative paths start from.

    With no file anywhere, the embedded defaults are used with the current directory as base.
    ``extra_retrievers``/``extra_dense`` name retriever objects supplied in code, so a file
    that relies on them (e.g. ``retrievers: []``) validates with them counted.
    """
    extras = {"extra_retrievers": extra_retrievers, "extra_dense": extra_dense}
    chosen = config_path(path)
    if chosen is None:
        return (
            parse_config(default_config_dict(), source="embedded defaults", **extras),
            Path.cwd(),
        )
    if not chosen.is_file():
        raise ConfigError(f"config file not found: {chosen}")
    try:
        data = yaml.safe_load(chosen.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"{chosen}: not valid YAML: {error}") from None
    return parse_config(data or {}, source=str(chosen), **extras), chosen.parent.resolve()


LLM_ENDPOINT_MAX_TOKENS = 512


def with_llm_endpoint(
    config: PipelineConfig,
    base_url: str | None = None,
    *,
    model: str | None = None,
    rewriter_kind: str | None = None,
) -> PipelineConfig:
    """The config with its generator (and, given ``rewriter_kind``, a rewriter) on an
    OpenAI-compatible endpoint: what ``parallel-rag ask --llm URL [--model M] [--rewriter K]``
    runs. Without ``model`` the server's first listed model is used. Other ``llm`` settings of
    the config (api_key, temperature, max_tokens, timeouts) are kept; ``max_tokens`` defaults
    to ``LLM_ENDPOINT_MAX_TOKENS`` so a small local model cannot ramble to its context limit."""
    if model is not None and base_url is None:
        raise ConfigError("--model: only applies together with --llm URL")
    data = config.model_dump(exclude_unset=True)
    generator = dict(data.get("generator") or {})
    llm = generator.get("llm")
    if base_url is not None:
        url = normalize_base_url(base_url)
        kept = {k: v for k, v in (llm or {}).items() if k not in {"model", "base_url", "provider"}}
        key = kept.get("api_key")
        secret = key.get_secret_value() if hasattr(key, "get_secret_value") else key
        llm = {
            "max_tokens": LLM_ENDPOINT_MAX_TOKENS,
            **kept,
            "model": model or served_model_name(url, api_key=secret),
            "base_url": url,
        }
        data["generator"] = {**generator, "kind": "llm", "llm": llm}
    if rewriter_kind is not None:
        rewriter = dict(data.get("rewriter") or {})
        rewriter_llm = llm if base_url is not None else rewriter.get("llm") or llm
        if rewriter_llm is None:
            raise ConfigError(
                "--rewriter: needs --llm URL, or rewriter.llm/generator.llm in the config"
            )
        data["rewriter"] = {**rewriter, "kind": rewriter_kind, "llm": rewriter_llm}
    return parse_config(data, source="configuration with --llm/--rewriter")
