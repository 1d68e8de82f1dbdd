"""Per-run knobs: the graph's ``context_schema`` (LangGraph Runtime context), with a
``configurable`` fallback for callers that only speak RunnableConfig (LangServe, LCEL
``.with_config``), mapped to the context in one place (``knobs_from``: the graph's entry router
checks them, and every node of ours reads them the same way, ``graph/steps.py``).

A knob changes how one run uses the configured pipeline, never what it talks to: which of the
configured retrievers run, how many candidates each asks for, the fusion method, ``k`` and
weights, whether the configured reranker runs, and which kind of rewrite the configured chat
model does.
Nothing that could name an endpoint, a key, a path or a model is a knob, so a request can never
redirect the app.

The knobs are parsed and checked (``KnobScope.check``) once, as a run starts (the entry router,
before any node); every node that needs one reads it from its ``runtime.context``, which
``GraphStep`` hands it with the ``configurable`` knobs merged in, so nothing carries them
through the state or the ``Send`` payloads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from parallel_rag.backends.registry import setting_names
from parallel_rag.graph.configuration import MAX_RETRIEVERS, RewriterConfig
from parallel_rag.graph.errors import FieldError, problems
from parallel_rag.nodes.fuse import FusionMethod, method_for_k
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

RewriterKnob = Literal["multi_query", "decompose", "hyde", "none"]
RetrieverName = Annotated[str, Field(min_length=1, max_length=100)]  # checked against the graph


def drop_null_branches(schema: dict[str, Any]) -> None:
    """JSON-schema hook: show ``X | None`` fields as ``X``, unset by default (None means unset).
    Form renderers such as LangServe's playground cannot draw a ``{"type": "null"}`` branch."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]
        branches = prop.get("anyOf")
        if branches and {"type": "null"} in branches:
            rest = [b for b in branches if b != {"type": "null"}]
            prop.pop("anyOf")
            if len(rest) == 1:
                prop.update(rest[0])
            else:
                prop["anyOf"] = rest


class RAGContext(BaseModel):
    """Per-run settings shown in LangGraph Studio's context panel. Unset means "as configured"."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=drop_null_branches)

    retrievers: list[RetrieverName] | None = Field(
        default=None,
        max_length=MAX_RETRIEVERS,
        description="run only these configured retrievers (by name); empty or unset: all",
    )
    retriever_top_k: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="candidates each branch asks its retriever for (overrides the branch top_k)",
    )
    fusion_k: int | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="reciprocal rank fusion constant k; without fusion_method it means rrf",
    )
    fusion_weights: dict[RetrieverName, Annotated[float, Field(ge=0, le=1000)]] | None = Field(
        default=None, description="per-retriever fusion weight; unnamed retrievers keep theirs"
    )
    fusion_method: FusionMethod | None = Field(
        default=None,
        validate_default=True,  # a fusion_k without it still reaches _k_means_rrf
        description="fusion: rrf, or normalised scores (minmax, zscore, dbsf)",
    )
    rerank: bool | None = Field(
        default=None, description="false skips the configured reranker for this run"
    )
    rewriter: RewriterKnob | None = Field(
        default=None,
        description="rewrite kind for this run with the configured chat model; 'none' skips it",
    )

    @field_validator("retrievers", "fusion_weights")
    @classmethod
    def _empty_is_unset(cls, value):
        return value or None  # a form's empty list/mapping means "as configured"

    @field_validator("fusion_method")
    @classmethod
    def _k_means_rrf(cls, method: str | None, info: ValidationInfo) -> str | None:
        # the configuration's rule (nodes/fuse.py method_for_k), per run: a fusion_k without a
        # method asks for RRF, and one beside a score method is refused here
        return method_for_k(
            method,
            k_given=info.data.get("fusion_k") is not None,
            k_path="fusion_k",
            method_path="fusion_method",
        )


KNOBS: frozenset[str] = frozenset(RAGContext.model_fields)
UNSET = RAGContext()
"""A run that sets no knob: the pipeline as configured (frozen, so shared)."""

SETTINGS_NOT_KNOBS: frozenset[str] = setting_names() | frozenset(
    """backend backend_config embeddings tenant_field mcp_servers upstream routing api_base
    openai_api_base openai_api_key base_url api_key""".split()
)
"""Configuration fields a run might try to set through ``configurable``: refused by name, so
a hostile payload fails loudly instead of being silently ignored (none is ever read from a
run's config). Every backend setting (``registry.setting_names``: endpoints, keys, paths,
collections, legs...) and, by hand, the entry's and the pipeline's own sections and the chat
models' endpoint and key names. Generic names such as ``model`` stay free for composed LCEL
apps."""


class KnobError(FieldError):
    """A per-run setting the pipeline cannot honour; ``field`` is its dotted path."""


def _parse(data: Mapping[str, Any], where: str) -> RAGContext:
    try:
        return RAGContext.model_validate(dict(data))
    except ValidationError as error:
        raise KnobError.of(problems(error, data, prefix=where)) from None


def knobs_from(context: Any, configurable: Mapping[str, Any] | None) -> RAGContext:
    """The run's knobs: each one set in the Runtime ``context`` wins over the same name in
    ``configurable``; other ``configurable`` keys (thread ids, server headers) are not knobs,
    but one naming an endpoint, key, path or backend setting is refused."""
    hostile = sorted(set(configurable or {}) & SETTINGS_NOT_KNOBS)
    if hostile:
        raise KnobError(
            f"configurable.{hostile[0]}",
            f"not a per-run setting: endpoints, keys, paths and backends come only from the "
            f"configuration file (per-run knobs: {sorted(KNOBS)})",
        )
    picked = {k: v for k, v in (configurable or {}).items() if k in KNOBS and v is not None}
    knobs = _parse(picked, "configurable") if picked else None
    if context is None:
        return knobs or UNSET
    if not isinstance(context, RAGContext):
        if not isinstance(context, Mapping):
            context = getattr(context, "__dict__", {})
        context = _parse(context, "context")
    if knobs is None:
        return context
    # validated again as one: a fusion_k from one beside a score method from the other is
    # refused as it would be from either
    return _parse(
        {**knobs.model_dump(exclude_none=True), **context.model_dump(exclude_none=True)}, "context"
    )


@dataclass(frozen=True)
class KnobScope:
    """What a compiled graph can honour: its retriever names, which are dense, and whether a
    reranker and a rewriter are configured. ``check`` names the field a run asked wrongly."""

    retrievers: tuple[str, ...]
    dense: frozenset[str] = frozenset()
    has_reranker: bool = False
    rewriter_kind: str | None = None

    def check(self, knobs: RAGContext) -> RAGContext:
        known = set(self.retrievers)
        if knobs.retrievers is not None:
            unknown = sorted(set(knobs.retrievers) - known)
            if unknown:
                raise KnobError(
                    "retrievers",
                    f"unknown retriever(s) {unknown}; configured: {list(self.retrievers)}",
                )
            if len(set(knobs.retrievers)) != len(knobs.retrievers):
                raise KnobError("retrievers", "names a retriever more than once")
        unknown = sorted(set(knobs.fusion_weights or {}) - known)
        if unknown:
            raise KnobError(
                "fusion_weights",
                f"unknown retriever(s) {unknown}; configured: {list(self.retrievers)}",
            )
        if knobs.rerank and not self.has_reranker:
            raise KnobError("rerank", "no reranker is configured, so it cannot be turned on")
        if knobs.rewriter not in (None, "none") and self.rewriter_kind is None:
            raise KnobError("rewriter", "no rewriter (chat model) is configured")
        if (knobs.rewriter or self.rewriter_kind) == "hyde" and not self.active(knobs) & self.dense:
            field = "rewriter" if knobs.rewriter else "retrievers"
            raise KnobError(field, "'hyde' needs at least one dense (vector) retriever in the run")
        return knobs

    def active(self, knobs: RAGContext) -> set[str]:
        """The retriever names this run uses."""
        return set(knobs.retrievers or self.retrievers)


class SwitchableRewriter:
    """The configured rewriter, switched per run (``rewriter`` knob) to another kind over the
    same chat model. Variants are built once per kind, on first use."""

    def __init__(
        self,
        config: RewriterConfig,
        model: BaseChatModel | None,
        make: Callable[[RewriterConfig, BaseChatModel | None], Any],
    ):
        self.config = config
        self.model = model
        self.make = make
        self.variants: dict[str, Any] = {config.kind: make(config, model)}

    def variant(self, kind: str | None) -> Any:
        """The rewriter of ``kind`` (None or "none": the configured one)."""
        if kind in (None, "none"):
            kind = self.config.kind
        if kind not in self.variants:
            # a custom prompt is written for the configured kind; other kinds use their default
            self.variants[kind] = self.make(
                self.config.model_copy(update={"kind": kind, "prompt": None}), self.model
            )
        return self.variants[kind]

    def rewrite(
        self, query: str, config: RunnableConfig | None = None, *, kind: str | None = None
    ) -> list[tuple[str, str]]:
        return self.variant(kind).rewrite(query, config)
