"""Turns configuration into live components: one factory per backend behind one dispatch,
plus the rewriter, reranker and generator factories. Relative paths start at ``base_dir``
(the config file's directory)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.bm25 import BM25Retriever
from parallel_rag.backends.chat_models import make_chat_model
from parallel_rag.backends.generators import ChatModelGenerator, ExtractiveGenerator
from parallel_rag.backends.prompts import GENERATOR_SYSTEM_PROMPT
from parallel_rag.backends.qdrant import QdrantRetriever
from parallel_rag.backends.rerank_scorers import EmbeddingSimilarityScorer
from parallel_rag.backends.rewriters import ChatModelRewriter
from parallel_rag.graph.configuration import (
    BM25Entry,
    ConfigError,
    EmbeddingsConfig,
    GeneratorConfig,
    PipelineConfig,
    QdrantEntry,
    RerankerConfig,
    RetrieverEntry,
    RewriterConfig,
)

DEFAULT_BACKEND_K = 10


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


RETRIEVER_FACTORIES: dict[str, Callable[..., BaseRetriever]] = {
    "bm25": make_bm25,
    "qdrant": make_qdrant,
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


def make_generator(config: GeneratorConfig, model: BaseChatModel | None):
    if model is None and config.kind == "llm":
        if config.llm is None:
            raise ConfigError(
                "generator.llm: kind 'llm' needs a chat model (set generator.llm, or pass "
                "generator_model= to build_graph)"
            )
        model = make_chat_model(config.llm)
    if model is None:
        return ExtractiveGenerator(max_sentences=config.max_sentences)
    return ChatModelGenerator(
        model,
        injection_mode=config.injection_mode,
        max_context_length=config.max_context_length,
        system_prompt=config.system_prompt or GENERATOR_SYSTEM_PROMPT,
    )


def make_scorer(config: RerankerConfig) -> EmbeddingSimilarityScorer:
    return EmbeddingSimilarityScorer(config.model, config.device)
