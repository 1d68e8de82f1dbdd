"""The pipeline configuration schema: pydantic models and their cross-field checks, errors
naming the field. Loading it from YAML, the environment or the embedded defaults lives in
``graph/loading.py``.

A retriever entry takes the fields of a ``rag`` plugin entry unchanged (``backend``, ``top_k``,
``similarity_threshold``, ``on_failure``, ``backend_config``, plus ``enabled`` and
``injection_mode``), so a plugin ``configuration`` block can be pasted in. Each backend owns the
model of its ``backend_config`` (``backends/<name>/settings.py``, imported with the registry
without the backend's retriever or client library) and declares it in ``backends/registry.py``;
this module derives one entry model per backend from the registry and composes them,
discriminated on ``backend``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from parallel_rag.backends.base import BackendSpec, RetrievalKind, SettingError
from parallel_rag.backends.encoders.embeddings import BUNDLED
from parallel_rag.backends.extras import MissingExtraError, require_extra
from parallel_rag.backends.mcp.settings import MCPServerConfig
from parallel_rag.backends.registry import BACKENDS, REFUSED, leaf_entries, term_index_backends
from parallel_rag.graph.errors import ConfigError as ConfigError  # re-exported, raised elsewhere
from parallel_rag.graph.errors import FieldError
from parallel_rag.nodes.chat_models import ChatModelSettings
from parallel_rag.nodes.failure_policy import FailurePolicy
from parallel_rag.nodes.fuse import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION_K,
    DEFAULT_FUSION_METHOD,
    FusionMethod,
    method_for_k,
)
from parallel_rag.nodes.generate.sentence_vectors import DEFAULT_PATH as SENTENCE_VECTORS_PATH
from parallel_rag.nodes.rerank.listwise import validate_ranking_prompt
from parallel_rag.nodes.rewrite.rewriters import validate_prompt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

MIN_RETRIEVERS, MAX_RETRIEVERS = 2, 4
DEFAULT_RERANK_CANDIDATES = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrieverEntry(_Strict):
    """Fields every retriever entry shares (a ``rag`` plugin entry's, plus a branch name). Each
    backend's entry model adds ``backend`` and ``backend_config`` and carries its registry
    entry as ``spec``, which decides the retrieval kind and whether ``similarity_threshold``
    applies."""

    spec: ClassVar[BackendSpec | None] = None

    name: str = Field(default="", pattern=r"^$|^[A-Za-z0-9_.-]{1,40}$")
    enabled: bool = True
    top_k: int | None = Field(default=None, gt=0, le=1000)
    similarity_threshold: float | None = Field(default=None, ge=0, le=1)
    on_failure: FailurePolicy | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    injection_mode: Literal["tool_role", "system_prompt"] | None = Field(
        default=None,
        description="accepted so rag plugin entries paste in unchanged; set it on the generator",
    )

    @field_validator("similarity_threshold")
    @classmethod
    def _threshold_applies_to_backend(cls, value: float | None) -> float | None:
        refusal = cls.spec.threshold_refusal if cls.spec is not None else None
        if value is not None and isinstance(refusal, str):
            raise ValueError(f"does not apply to {cls.spec.name}: {refusal}")
        return value

    @model_validator(mode="after")
    def _default_name(self) -> RetrieverEntry:
        if not self.name:
            self.name = self.backend  # type: ignore[attr-defined]
        return self

    @model_validator(mode="after")
    def _threshold_applies_to_settings(self) -> RetrieverEntry:
        refusal = self.spec.threshold_refusal if self.spec is not None else None
        if self.similarity_threshold is not None and callable(refusal):
            reason = refusal(self.backend_config)  # type: ignore[attr-defined]
            if reason:
                raise ValueError(f"similarity_threshold: {reason}")
        return self

    @property
    def retrieval_kind(self) -> RetrievalKind:
        """Which query views the branch takes: dense ones also get HyDE passages."""
        assert self.spec is not None
        return self.spec.kind_of(self.backend_config)  # type: ignore[attr-defined]

    @property
    def is_dense(self) -> bool:
        return self.retrieval_kind == "dense"


def _model_name(backend: str, suffix: str) -> str:
    return "".join(part.capitalize() for part in backend.split("_")) + suffix


def _discriminated(models: list[type[RetrieverEntry]]) -> Any:
    return Annotated[Union[tuple(models)], Field(discriminator="backend")]  # noqa: UP007


def _refused_entry(backend: str, reason: str) -> type[RetrieverEntry]:
    """An entry model that accepts the backend's name only to refuse it, naming the entry."""

    def refuse(cls: type, data: Any) -> Any:
        raise ValueError(reason)

    return create_model(
        _model_name(backend, "Entry"),
        __base__=RetrieverEntry,
        __module__=__name__,
        __validators__={"_refuse": model_validator(mode="before")(classmethod(refuse))},
        backend=(Literal[backend], ...),
        backend_config=(dict[str, Any], Field(default_factory=dict)),
    )


def _with_legs(spec: BackendSpec, leg_entry: Any) -> type[BaseModel]:
    """The backend's settings plus one field per leg, each a full entry of another backend
    (a backend with legs may not be one); legs that share a name get the leg's as suffix."""

    def no_nesting(cls: type, value: Any) -> Any:
        nested = value.get("backend") if isinstance(value, dict) else None
        if nested in BACKENDS and BACKENDS[nested].legs:
            raise ValueError(f"a {spec.name} may not nest a {nested}")
        return value

    def distinct_names(self: BaseModel) -> BaseModel:
        legs = [(leg, getattr(self, leg)) for leg in spec.legs if getattr(self, leg) is not None]
        names = [entry.name for _, entry in legs]
        for leg, entry in legs:
            if names.count(entry.name) > 1:
                entry.name = f"{entry.name}-{leg}"
        return self

    fields: dict[str, Any] = {
        leg: (leg_entry, ...) if required else (leg_entry | None, None)
        for leg, required in spec.legs.items()
    }
    return create_model(
        _model_name(spec.name, "Settings"),
        __base__=spec.settings,
        __module__=__name__,
        __validators__={
            "_no_nesting": field_validator(*spec.legs, mode="before")(classmethod(no_nesting)),
            "_distinct_names": model_validator(mode="after")(distinct_names),
        },
        **fields,
    )


def _entry_model(spec: BackendSpec, leg_entry: Any = None) -> type[RetrieverEntry]:
    """The retriever entry of one backend; ``backend_config`` may be omitted when every field
    of its settings has a default."""
    settings = _with_legs(spec, leg_entry) if spec.legs else spec.settings
    required = any(field.is_required() for field in settings.model_fields.values())
    model = create_model(
        _model_name(spec.name, "Entry"),
        __base__=RetrieverEntry,
        __module__=__name__,
        backend=(Literal[spec.name], ...),
        backend_config=(settings, ...) if required else (settings, Field(default_factory=settings)),
    )
    model.spec = spec
    return model


REFUSED_ENTRIES = {name: _refused_entry(name, reason) for name, reason in REFUSED.items()}
_LEG_ENTRIES = {name: _entry_model(spec) for name, spec in BACKENDS.items() if not spec.legs}
NESTED_BACKENDS = frozenset(_LEG_ENTRIES) | frozenset(REFUSED)
"""The ``backend`` values a leg (a hybrid's primary or fallback) may name: every backend
without legs of its own, refused ones included (so they are refused there too)."""
LegEntry = _discriminated([*_LEG_ENTRIES.values(), *REFUSED_ENTRIES.values()])

ENTRY_MODELS: dict[str, type[RetrieverEntry]] = {
    name: _LEG_ENTRIES.get(name) or _entry_model(spec, LegEntry) for name, spec in BACKENDS.items()
}
"""The entry model of every registered backend, by ``backend`` value."""
AnyRetrieverEntry = _discriminated([*ENTRY_MODELS.values(), *REFUSED_ENTRIES.values()])


class RewriterConfig(_Strict):
    """Query rewriting with a chat model (README "LLM rewriting and generation"), or without one:
    kind ``prf`` expands the question with ``fb_terms`` terms from the top ``fb_docs`` documents
    of the pipeline's BM25 retriever (pseudo-relevance feedback; lexical branches only)."""

    kind: Literal["multi_query", "decompose", "hyde", "prf"] = "multi_query"
    num_queries: int = Field(default=3, ge=1, le=8)
    include_original: bool = True
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0, le=4096)
    on_failure: FailurePolicy | None = None
    prompt: str | None = Field(
        default=None, description="replaces the kind's prompt; placeholders {query}, {num_queries}"
    )
    llm: ChatModelSettings | None = None
    fb_docs: int = Field(default=10, ge=1, le=100, description="kind prf: feedback documents")
    fb_terms: int = Field(default=10, ge=1, le=50, description="kind prf: expansion terms")

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
    """How branches are fused. ``method`` says it; a ``k`` without a ``method`` asks for RRF
    (``fusion: {k: 60}``), and a ``k`` beside a score method is refused (it would go unused), so
    a config written for RRF never fuses another way in silence."""

    method: FusionMethod = Field(
        default=DEFAULT_FUSION_METHOD,
        description="rrf (ranks) or a weighted sum of per-branch normalised scores: "
        "minmax, zscore, dbsf (mean +- 3 std); a k without a method means rrf",
    )
    k: int = Field(
        default=DEFAULT_FUSION_K,
        gt=0,
        description="RRF constant (method rrf only); score methods keep the default as the rank "
        "offset of pseudo-scores given to a branch without usable scores",
    )
    weights: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="per retriever name; wins over dense_weight"
    )
    dense_weight: float = Field(
        default=DEFAULT_DENSE_WEIGHT,
        ge=0,
        description="weight of each dense (vector) retriever that weights does not name; "
        "every other retriever defaults to 1",
    )

    # the rule is nodes/fuse.py's method_for_k, shared with a run's knobs; here in two steps,
    # as a method left out of the file is only seen before validation fills in the default
    _PATHS: ClassVar[dict[str, str]] = {"k_path": "fusion.k", "method_path": "fusion.method"}

    @model_validator(mode="before")
    @classmethod
    def _bare_k_means_rrf(cls, data: Any) -> Any:
        if isinstance(data, dict) and "k" in data and "method" not in data:
            return {**data, "method": method_for_k(None, k_given=True, **cls._PATHS)}
        return data

    @field_validator("k")
    @classmethod
    def _k_is_rrfs(cls, k: int, info: ValidationInfo) -> int:
        # no method in info.data: it failed its own validation, which reports it
        method_for_k(info.data.get("method"), k_given=True, **cls._PATHS)
        return k

    @model_serializer(mode="wrap")
    def _without_unused_k(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a dump of a score method's settings loads again: its k is not written out
        data = handler(self)
        if self.method != "rrf":
            data.pop("k", None)
        return data

    def weights_for(self, dense: Iterable[str]) -> dict[str, float]:
        """The weight of every retriever ``weights`` names, or that is dense (``dense``)."""
        return {**dict.fromkeys(dense, self.dense_weight), **self.weights}


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
    sentence_vectors: str | None = Field(
        default=SENTENCE_VECTORS_PATH,
        min_length=1,
        description="extractive: SQLite file of sentence vectors that ingest writes and the "
        "generator reads instead of embedding evidence per request (relative paths start at "
        "the config file's directory); null = neither writes nor reads it",
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


class ConversationConfig(_Strict):
    """How a follow-up question is written out before retrieval. Without ``llm`` (the default)
    the subject is carried over from the earlier turns without a model; with one, the chat
    model writes a standalone question from the recent turns (only when the question refers
    back; never on a first turn)."""

    llm: ChatModelSettings | None = None


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
