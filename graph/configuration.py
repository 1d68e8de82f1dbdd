"""The pipeline configuration schema: pydantic models and their cross-field checks, errors
naming the field. Loading it from YAML, the environment or the embedded defaults lives in
``graph/loading.py``.

A retriever entry takes the fields of a ``rag`` plugin entry unchanged (``backend``, ``top_k``,
``similarity_threshold``, ``on_failure``, ``backend_config``, plus ``enabled`` and
``injection_mode``), so a plugin ``configuration`` block can be pasted in. Each backend owns the
model of its ``backend_config`` (``backends/<name>/settings.py``, imported with the registry
without the backend's retriever or client library) and declares it in ``backends/registry.py``;
``graph/retriever_entries.py`` derives one entry model per backend from the registry and
composes them, discriminated on ``backend``; the other sections' models are in
``graph/stage_settings.py``. This module holds the whole pipeline (``PipelineConfig``) and its
checks across sections, and is where the schema's names are imported from.

The schema's models (these, the entries' and every backend's settings) defer building their
validators to the first configuration validated (pydantic's ``defer_build``): importing the
graph builds none of them, which was about half of the import's own cost (issue 51's bar:
``bench/install_footprint.py``); the first ``parse_config`` builds them all, once.
"""

from __future__ import annotations

from parallel_rag.backends.base import SettingError
from parallel_rag.backends.encoders.embeddings import BUNDLED
from parallel_rag.backends.extras import MissingExtraError, require_extra
from parallel_rag.backends.mcp.settings import MCPServerConfig
from parallel_rag.backends.registry import BACKENDS, leaf_entries, term_index_backends
from parallel_rag.graph.errors import ConfigError as ConfigError  # re-exported, raised elsewhere
from parallel_rag.graph.errors import FieldError
from parallel_rag.graph.retriever_entries import (
    ENTRY_MODELS,
    NESTED_BACKENDS,
    REFUSED_ENTRIES,
    AnyRetrieverEntry,
    LegEntry,
    RetrieverEntry,
)
from parallel_rag.graph.stage_settings import (
    DEFAULT_RERANK_CANDIDATES,
    ConversationConfig,
    EmbeddingsConfig,
    FusionConfig,
    GeneratorConfig,
    RerankerConfig,
    RewriterConfig,
)
from parallel_rag.nodes.failure_policy import FailurePolicy
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

__all__ = [  # the schema's names, wherever they are defined
    "DEFAULT_RERANK_CANDIDATES",
    "ENTRY_MODELS",
    "MAX_RETRIEVERS",
    "MIN_RETRIEVERS",
    "NESTED_BACKENDS",
    "REFUSED_ENTRIES",
    "AnyRetrieverEntry",
    "ConfigError",
    "ConversationConfig",
    "EmbeddingsConfig",
    "FusionConfig",
    "GeneratorConfig",
    "LegEntry",
    "PipelineConfig",
    "RerankerConfig",
    "RetrieverEntry",
    "RewriterConfig",
]

MIN_RETRIEVERS, MAX_RETRIEVERS = 2, 4


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class PipelineConfig(_Strict):
    """The whole workflow. Retriever objects passed in code count toward the 2..4 limit
    (give their names as validation context ``extra_retrievers``)."""

    retrievers: list[AnyRetrieverEntry] = Field(default_factory=list)
    rewriter: RewriterConfig | None = None
    reranker: RerankerConfig | None = None
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    conversation: ConversationConfig = Field(default_factory=ConversationConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    on_failure: FailurePolicy = "warn"
    tenant_field: str = Field(default="tenant", min_length=1)
    mcp_servers: dict[str, MCPServerConfig] = Field(
        default_factory=dict, description="MCP servers the mcp retrievers name (server_name)"
    )

    @field_validator("retrievers", mode="after")
    @classmethod
    def _enabled_only(cls, entries: list[RetrieverEntry]) -> list[RetrieverEntry]:
        return [entry for entry in entries if entry.enabled]

    def check_backends(self) -> None:
        """Each backend's own check of its entries against the pipeline (an mcp entry names a
        server declared under ``mcp_servers``); a route's pipeline runs it too."""
        for used in leaf_entries(self.retrievers):
            spec = BACKENDS[used.backend]
            if spec.extra is not None:
                try:
                    require_extra(spec.extra, f"backend {used.backend!r}")
                except MissingExtraError as error:
                    raise FieldError(f"retrievers.{used.name}.backend", str(error)) from None
            check = spec.check
            if check is None:
                continue
            try:
                check(used.backend_config, self)
            except SettingError as error:
                field = f"retrievers.{used.name}.backend_config.{error.field}"
                raise FieldError(field, str(error)) from None

    def needed_extras(self) -> list[tuple[str, str, str]]:
        """(field, extra, what) for each part outside the backends that needs an extra: chat
        models (an OpenAI-compatible ``base_url``: ``openai``; a ``provider:model`` name:
        ``providers``), a cross-encoder reranker and any embedding model but the bundled one
        on the CPU (``torch``)."""
        needed = []
        chat_models = {
            "rewriter.llm": self.rewriter and self.rewriter.llm,
            "reranker.llm": self.reranker and self.reranker.llm,
            "generator.llm": self.generator.llm,
            "conversation.llm": self.conversation.llm,
        }
        for field, settings in chat_models.items():
            if settings:
                compatible = settings.provider == "openai_compatible" or (
                    settings.provider is None and settings.base_url
                )
                if compatible:
                    needed.append((field, "openai", "an OpenAI-compatible chat model"))
                else:
                    needed.append((field, "providers", f"the chat model {settings.model!r}"))
        if self.reranker is not None and (
            self.reranker.kind == "cross_encoder" or self.reranker.model not in (None, BUNDLED)
        ):
            needed.append(("reranker.model", "torch", f"a {self.reranker.kind} reranker model"))
        if self.embeddings.model != BUNDLED or self.embeddings.device != "cpu":
            needed.append(("embeddings.model", "torch", "an embedding model other than bundled"))
        return needed

    @model_validator(mode="after")
    def _check_extras(self) -> PipelineConfig:
        for field, extra, what in self.needed_extras():
            try:
                require_extra(extra, what)
            except MissingExtraError as error:
                raise FieldError(field, str(error)) from None
        return self

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
        self.check_backends()
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
        if (
            self.rewriter is not None
            and self.rewriter.kind == "prf"
            and not any(BACKENDS[e.backend].term_index for e in self.retrievers)
            and not extra  # a retriever object may keep a term index: checked when built
        ):
            raise ValueError(
                "rewriter.kind: 'prf' expands queries from a BM25 index, and no retriever "
                f"keeps one (backend {' or '.join(map(repr, term_index_backends()))})"
            )
        return self
