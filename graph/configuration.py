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
from parallel_rag.backends.chat_models import ChatModelSettings
from parallel_rag.backends.embeddings import BUNDLED
from parallel_rag.backends.qdrant import QdrantSettings
from parallel_rag.nodes.fuse import DEFAULT_RRF_K
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
FailurePolicy = Literal["skip", "warn", "block"]
DENSE_BACKENDS = {"qdrant"}
MIN_RETRIEVERS, MAX_RETRIEVERS = 2, 4


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


AnyRetrieverEntry = Annotated[BM25Entry | QdrantEntry, Field(discriminator="backend")]


class RewriterConfig(_Strict):
    kind: Literal["multi_query", "decompose", "hyde"] = "multi_query"
    num_queries: int = Field(default=3, ge=1, le=8)
    include_original: bool = True
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0, le=4096)
    on_failure: FailurePolicy | None = None
    prompt: str | None = None
    llm: ChatModelSettings | None = None


class RerankerConfig(_Strict):
    kind: Literal["embedding"] = "embedding"
    model: str = BUNDLED
    device: str = "cpu"
    top_k: int | None = Field(default=None, gt=0)
    on_failure: FailurePolicy | None = None


class FusionConfig(_Strict):
    k: int = Field(default=DEFAULT_RRF_K, gt=0)
    weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)


class GeneratorConfig(_Strict):
    kind: Literal["extractive", "llm"] = "extractive"
    max_sentences: int = Field(default=3, ge=1, le=20)
    llm: ChatModelSettings | None = None
    injection_mode: Literal["tool_role", "system_prompt"] = "tool_role"
    max_context_length: int = Field(default=10000, gt=0)
    system_prompt: str | None = None


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
