"""The settings of the pipeline's stages beside retrieval, each a section of the
configuration: ``rewriter``, ``reranker``, ``fusion``, ``generator``, ``conversation`` and
``embeddings``, with their cross-field checks (errors name the field). The pipeline that holds
them is ``graph/configuration.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from parallel_rag.backends.encoders.embeddings import BUNDLED
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
    field_validator,
    model_serializer,
    model_validator,
)

DEFAULT_RERANK_CANDIDATES = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


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
