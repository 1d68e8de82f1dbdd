"""Turns configuration into live components: one factory per backend behind one dispatch,
plus the rewriter, reranker and generator factories. Relative paths start at ``base_dir``
(the config file's directory)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.bm25 import BM25Retriever
from parallel_rag.nodes.chat_models import make_chat_model
from parallel_rag.nodes.rerank.cross_encoder import CrossEncoderScorer, ModelFormatError
from parallel_rag.backends.embeddings import load_embeddings
from parallel_rag.backends.external_api import ExternalAPIRetriever
from parallel_rag.nodes.generate.generators import ChatModelGenerator, ExtractiveGenerator
from parallel_rag.backends.hybrid import HybridRetriever
from parallel_rag.nodes.rerank.listwise import ListwiseLLMScorer
from parallel_rag.backends.milvus import MilvusRetriever
from parallel_rag.backends.openai_file_search import OpenAIFileSearchRetriever
from parallel_rag.nodes.prompts import GENERATOR_SYSTEM_PROMPT, LISTWISE_RERANK_PROMPT
from parallel_rag.backends.qdrant import QdrantRetriever
from parallel_rag.nodes.rerank.scorers import (
    BudgetSettingError,
    EmbeddingSimilarityScorer,
    ExitNotTrainedError,
    ScorerUnavailableError,
)
from parallel_rag.nodes.rewrite.rewriters import ChatModelRewriter
from parallel_rag.backends.vectorstore import VectorStoreRetriever
from parallel_rag.graph.configuration import (
    BM25Entry,
    ConfigError,
    EmbeddingsConfig,
    ExternalAPIEntry,
    GeneratorConfig,
    HybridEntry,
    MilvusEntry,
    OpenAIEntry,
    PipelineConfig,
    QdrantEntry,
    RerankerConfig,
    RetrieverEntry,
    RewriterConfig,
    VectorStoreEntry,
)

DEFAULT_BACKEND_K = 10
logger = logging.getLogger(__name__)


def resolve_path(path: str, base_dir: Path) -> str:
    candidate = Path(path).expanduser()
    return str(candidate if candidate.is_absolute() else (base_dir / candidate).resolve())


def make_bm25(entry: BM25Entry, base_dir: Path, embeddings: EmbeddingsConfig) -> BaseRetriever:
    settings = entry.backend_config
    return BM25Retriever(
        index_path=resolve_path(settings.index_path, base_dir),
        engine=settings.engine,
        k=entry.top_k or DEFAULT_BACKEND_K,
        k1=settings.k1,
        b=settings.b,
    )


def make_qdrant(entry: QdrantEntry, base_dir: Path, embeddings: EmbeddingsConfig) -> BaseRetriever:
    return QdrantRetriever(
        settings=entry.backend_config,
        base_dir=base_dir,
        k=entry.top_k or DEFAULT_BACKEND_K,
        score_threshold=entry.similarity_threshold,
        embedding_model=embeddings.model,
        device=embeddings.device,
    )


def make_milvus(entry: MilvusEntry, base_dir: Path, embeddings: EmbeddingsConfig) -> BaseRetriever:
    return MilvusRetriever(
        settings=entry.backend_config,
        base_dir=base_dir,
        k=entry.top_k or DEFAULT_BACKEND_K,
        score_threshold=entry.similarity_threshold,
        embedding_model=embeddings.model,
        device=embeddings.device,
    )


def make_external_api(
    entry: ExternalAPIEntry, base_dir: Path, embeddings: EmbeddingsConfig
) -> BaseRetriever:
    return ExternalAPIRetriever(
        settings=entry.backend_config,
        k=entry.top_k or DEFAULT_BACKEND_K,
        score_threshold=entry.similarity_threshold,
        embedding_model=embeddings.model,
        device=embeddings.device,
    )


def make_openai(entry: OpenAIEntry, base_dir: Path, embeddings: EmbeddingsConfig) -> BaseRetriever:
    settings = entry.backend_config
    api_key = settings.resolved_api_key()
    if api_key is None:
        raise ConfigError(
            f"retrievers.{entry.name}.backend_config.api_key: not set, and "
            f"${settings.api_key_env} is empty"
        )
    return OpenAIFileSearchRetriever(
        settings=settings,
        api_key=api_key,
        k=entry.top_k or DEFAULT_BACKEND_K,
        score_threshold=entry.similarity_threshold,
    )


def make_vectorstore(
    entry: VectorStoreEntry, base_dir: Path, embeddings: EmbeddingsConfig
) -> BaseRetriever:
    return VectorStoreRetriever(
        settings=entry.backend_config,
        base_dir=base_dir,
        k=entry.top_k or DEFAULT_BACKEND_K,
        score_threshold=entry.similarity_threshold,
        embedding_model=embeddings.model,
        device=embeddings.device,
    )


def _nested_timeout(nested: RetrieverEntry, outer: RetrieverEntry) -> float:
    """A nested entry's own timeout when it sets one, else the hybrid's."""
    if "timeout_seconds" in nested.model_fields_set:
        return nested.timeout_seconds
    return outer.timeout_seconds


def make_hybrid(entry: HybridEntry, base_dir: Path, embeddings: EmbeddingsConfig) -> BaseRetriever:
    """Both legs built by their own factories; the graph splits them into the ``retrieve`` and
    ``fallback`` nodes, and the retriever alone runs the same strategy outside the graph."""
    settings = entry.backend_config
    primary, fallback = settings.primary, settings.fallback
    return HybridRetriever(
        primary=RETRIEVER_FACTORIES[primary.backend](primary, base_dir, embeddings),
        fallback=(
            None
            if fallback is None
            else RETRIEVER_FACTORIES[fallback.backend](fallback, base_dir, embeddings)
        ),
        primary_name=primary.name,
        fallback_name=fallback.name if fallback is not None else "fallback",
        strategy=settings.strategy,
        primary_timeout_seconds=_nested_timeout(primary, entry),
        fallback_timeout_seconds=(
            _nested_timeout(fallback, entry) if fallback else entry.timeout_seconds
        ),
    )


RETRIEVER_FACTORIES: dict[str, Callable[..., BaseRetriever]] = {
    "bm25": make_bm25,
    "qdrant": make_qdrant,
    "milvus": make_milvus,
    "external_api": make_external_api,
    "openai": make_openai,
    "vectorstore": make_vectorstore,
    "hybrid": make_hybrid,
}


def make_retriever(entry: RetrieverEntry, config: PipelineConfig, base_dir: Path) -> BaseRetriever:
    """The single dispatch from a retriever entry to its backend's factory."""
    factory = RETRIEVER_FACTORIES[entry.backend]  # type: ignore[attr-defined]
    return factory(entry, base_dir, config.embeddings)


def make_rewriter(config: RewriterConfig, model: BaseChatModel | None) -> ChatModelRewriter:
    if model is None:
        if config.llm is None:
            raise ConfigError(
                "rewriter.llm: a rewriter needs a chat model (set rewriter.llm, or pass "
                "rewriter_model= to build_graph)"
            )
        model = make_chat_model(config.llm)
    return ChatModelRewriter(
        model,
        kind=config.kind,
        num_queries=config.num_queries,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        prompt=config.prompt,
    )


def make_generator(
    config: GeneratorConfig, model: BaseChatModel | None, embeddings: EmbeddingsConfig | None = None
):
    if model is None and config.kind == "llm":
        if config.llm is None:
            raise ConfigError(
                "generator.llm: kind 'llm' needs a chat model (set generator.llm, or pass "
                "generator_model= to build_graph)"
            )
        model = make_chat_model(config.llm)
    if model is None:
        loader = None
        if embeddings is not None and config.min_similarity is not None:
            model_name, device = embeddings.model, embeddings.device
            loader = lambda: load_embeddings(model_name, device)  # noqa: E731  (lazy: first answer)
        return ExtractiveGenerator(
            max_sentences=config.max_sentences,
            embeddings=loader,
            min_similarity=config.min_similarity or 0.0,
            sentence_cache_size=config.sentence_cache_size,
        )
    return ChatModelGenerator(
        model,
        injection_mode=config.injection_mode,
        max_context_length=config.max_context_length,
        system_prompt=config.system_prompt or GENERATOR_SYSTEM_PROMPT,
    )


def make_scorer(
    config: RerankerConfig, model: BaseChatModel | None = None
) -> CrossEncoderScorer | EmbeddingSimilarityScorer | ListwiseLLMScorer:
    """The reranker's scorer, its model loaded now (once per process, shared by every branch).

    A ``layer``/``dimension`` the model was not trained for, or a ``max_tokens`` above what it
    reads, is a ``ConfigError`` naming the field. A model that cannot be found is not: like the
    seed, it follows ``on_failure`` on each request (and is retried, so it may appear later).
    ``kind: llm`` ranks with ``model`` when given, else with ``reranker.llm``.
    """
    if config.kind == "llm":
        if model is None and config.llm is None:
            raise ConfigError(
                "reranker.llm: kind 'llm' needs a chat model (set reranker.llm, or pass "
                "reranker_model= to build_graph)"
            )
        return ListwiseLLMScorer(
            model or make_chat_model(config.llm),
            window_size=config.window_size,
            window_step=config.window_step,
            passage_chars=config.passage_chars,
            overflow=config.overflow,
            prompt=config.prompt or LISTWISE_RERANK_PROMPT,
        )
    scorer: CrossEncoderScorer | EmbeddingSimilarityScorer
    assert config.model is not None  # validated: bundled for embedding, required otherwise
    if config.kind == "cross_encoder":
        scorer = CrossEncoderScorer(
            config.model,
            device=config.device,
            layer=config.layer,
            dimension=config.dimension,
            max_tokens=config.max_tokens,
            overflow=config.overflow,
            batch_size=config.batch_size,
        )
    else:
        scorer = EmbeddingSimilarityScorer(
            config.model,
            config.device,
            max_tokens=config.max_tokens,
            overflow=config.overflow,
        )
    try:
        scorer.prepare()
    except (ExitNotTrainedError, BudgetSettingError, ModelFormatError) as error:
        raise ConfigError(f"reranker.{error.field}: {error}") from None
    except ScorerUnavailableError as error:
        logger.warning("reranker model unavailable; on_failure applies per request: %s", error)
    return scorer
