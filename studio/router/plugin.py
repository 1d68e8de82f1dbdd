"""The ``rag`` plugin on a route: its ``configuration`` block is either the single-backend form
as the plugin prints it (``backend``, ``top_k``, ``similarity_threshold``, ``backend_config``,
``rerank: {top_k}``...) or a parallel pipeline (``retrievers``, ``rewriter``, ``reranker``,
``fusion``); both become a ``RoutePipelineConfig`` that ``build_graph`` compiles.

A route pipeline may have a single retriever: the 2..4 rule belongs to the parallel pipeline,
while a single-backend route is the plugin's own shape (its graph is the same workflow with one
branch, so failure policy, timeouts, thresholds, reranking and evidence records behave exactly
as in the parallel pipeline)."""

from __future__ import annotations

from typing import Any, Literal

from parallel_rag.graph.configuration import (
    MAX_RETRIEVERS,
    ConversationConfig,
    EmbeddingsConfig,
    FailurePolicy,
    FusionConfig,
    PipelineConfig,
    RerankerConfig,
    RewriterConfig,
)
from parallel_rag.graph.errors import FieldError
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

DEFAULT_ROUTE_TOP_K = 5
InjectionMode = Literal["tool_role", "system_prompt"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
            return self
        # one retriever: the parent's validator would refuse it, so its per-backend checks
        # (an mcp route names a declared server) run here
        try:
            self.check_backends()
        except FieldError as error:  # the block has no retriever list: name its own fields
            own = [(f.removeprefix(f"retrievers.{names[0]}."), m) for f, m in error.problems]
            raise FieldError.of(own) from None
        unknown = sorted(set(self.fusion.weights) - set(names))
        if unknown:
            raise ValueError(f"fusion.weights: unknown retriever name(s) {unknown}")
        if self.rewriter is not None and self.rewriter.kind == "hyde":
            if not self.retrievers[0].is_dense:
                raise ValueError("rewriter.kind: 'hyde' needs a dense (vector) retriever")
        return self


class RerankOptIn(_Strict):
    """``rerank:`` on a route: rerank with the bound scorer, keeping ``top_k`` (all if unset).
    ``max_candidates`` is the explicit scoring budget: how many of the retrieved candidates are
    scored (default: all of them, the route's ``top_k``); any beyond it follow unscored."""

    top_k: int | None = Field(default=None, gt=0, le=1000)
    max_candidates: int | None = Field(default=None, gt=0, le=1000)


_SINGLE_FIELDS = {"backend", "backend_config", "similarity_threshold", "timeout_seconds", "name"}


class RagPluginConfig(_Strict):
    """A ``rag`` plugin ``configuration`` block: the single-backend form as the plugin prints
    it, or a parallel pipeline. ``top_k``: candidates of the single backend (and documents
    injected unless ``rerank.top_k`` says fewer); in the pipeline form, fused documents
    injected. ``on_failure`` governs retrieval, rerank and "no context" alike. Either form
    takes ``conversation`` (the pipeline's own block: a chat model for follow-ups, if any)."""

    enabled: bool = True
    injection_mode: InjectionMode = "tool_role"
    on_failure: FailurePolicy = "warn"
    max_context_length: int = Field(default=10000, gt=0, le=1_000_000)
    top_k: int | None = Field(default=None, gt=0, le=100)
    rerank: RerankOptIn | None = None
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    tenant_field: str = Field(default="tenant", min_length=1)
    cache_results: bool | None = Field(
        default=None, description="this route's context cache on/off (unset: routing.context_cache)"
    )
    cache_ttl_seconds: float | None = Field(
        default=None, gt=0, description="this route's cache TTL (unset: routing.context_cache)"
    )
    conversation: ConversationConfig = Field(
        default_factory=ConversationConfig,
        description="how a follow-up is written out before retrieval: without llm (the "
        "default) the subject is carried over from the earlier turns; with one, that chat "
        "model writes a standalone question",
    )
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
            raise FieldError(
                single[0],
                "a configuration is either one backend (backend, backend_config) or a pipeline "
                "(retrievers), not both",
            )
        if self.enabled and self.retrievers is None and self.backend is None:
            raise FieldError("backend", "required (or a pipeline under retrievers)")
        if self.rerank is not None and self.reranker is not None:
            raise FieldError("rerank", "the pipeline's reranker block already reranks")
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

    def rerank_budget(self) -> int | None:
        """How many candidates of a branch the bound scorer scores: ``rerank.max_candidates``,
        else every candidate the route retrieves (the single backend's ``top_k``, the largest
        branch ``top_k`` of a pipeline; None leaves the reranker's default)."""
        if self.rerank is not None and self.rerank.max_candidates is not None:
            return self.rerank.max_candidates
        if not self.is_pipeline:
            return self.top_k or DEFAULT_ROUTE_TOP_K
        sizes = [r["top_k"] for r in self.retrievers or [] if isinstance(r.get("top_k"), int)]
        return max(sizes, default=None)

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
