"""Turns configuration into live components: the retriever of each entry (through the backend
registry), plus the rewriter, reranker and generator factories. Relative paths start at
``base_dir`` (the config file's directory)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.base import BackendContext, BuildRequest, SettingError, term_index_of
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.registry import BACKENDS, term_index_backends
from parallel_rag.graph.configuration import (
    ConfigError,
    EmbeddingsConfig,
    GeneratorConfig,
    PipelineConfig,
    RerankerConfig,
    RetrieverEntry,
    RewriterConfig,
)
from parallel_rag.nodes.chat_models import make_chat_model
from parallel_rag.nodes.prompts import GENERATOR_SYSTEM_PROMPT, LISTWISE_RERANK_PROMPT
from parallel_rag.nodes.rerank.listwise import ListwiseLLMScorer
from parallel_rag.nodes.rewrite.rewriters import ChatModelRewriter, PseudoRelevanceRewriter

if TYPE_CHECKING:  # each imported by the factory that builds it, when a configuration names it
    from parallel_rag.nodes.generate.chat import ChatModelGenerator
    from parallel_rag.nodes.generate.extractive import ExtractiveGenerator
    from parallel_rag.nodes.rerank.cross_encoder import CrossEncoderScorer
    from parallel_rag.nodes.rerank.scorers import EmbeddingSimilarityScorer

logger = logging.getLogger(__name__)


def backend_context(base_dir: Path, embeddings: EmbeddingsConfig) -> BackendContext:
    return BackendContext(base_dir, embeddings.model, embeddings.device)


def build_retriever(
    entry: RetrieverEntry,
    base_dir: Path,
    embeddings: EmbeddingsConfig,
    pipeline: PipelineConfig | None = None,
) -> BaseRetriever:
    """The retriever of one entry, built by its backend's registered factory (a hybrid's legs
    come back through here). A setting that validated but cannot be used is a ``ConfigError``
    naming ``retrievers.NAME.backend_config.FIELD``."""
    context = backend_context(base_dir, embeddings)

    def build(nested: RetrieverEntry) -> BaseRetriever:
        request = BuildRequest(nested, context, build, pipeline)
        try:
            return BACKENDS[nested.backend].factory(request)  # type: ignore[attr-defined]
        except SettingError as error:
            raise ConfigError(
                f"retrievers.{nested.name}.backend_config.{error.field}: {error}"
            ) from None

    return build(entry)


def make_retriever(entry: RetrieverEntry, config: PipelineConfig, base_dir: Path) -> BaseRetriever:
    """The single dispatch from a retriever entry of ``config`` to its backend's factory."""
    return build_retriever(entry, base_dir, config.embeddings, config)


def make_rewriter(
    config: RewriterConfig,
    model: BaseChatModel | None,
    retrievers: Sequence[BaseRetriever] = (),
) -> ChatModelRewriter | PseudoRelevanceRewriter:
    """The rewriter of ``config.kind``; ``prf`` reads the first term index a retriever keeps
    (a ``bm25`` retriever's)."""
    if config.kind == "prf":
        index = next(filter(None, map(term_index_of, retrievers)), None)
        if index is None:
            raise ConfigError(
                "rewriter.kind: 'prf' needs a retriever that keeps a term index in the pipeline "
                f"(backend {' or '.join(map(repr, term_index_backends()))})"
            )
        return PseudoRelevanceRewriter(index, fb_docs=config.fb_docs, fb_terms=config.fb_terms)
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
    config: GeneratorConfig,
    model: BaseChatModel | None,
    embeddings: EmbeddingsConfig | None = None,
    base_dir: Path | None = None,
) -> ExtractiveGenerator | ChatModelGenerator:
    """The generator of ``config.kind``. The extractive one reads the sentence vectors ingest
    stored at ``config.sentence_vectors`` (relative to ``base_dir``; not read without one),
    embedding only the sentences the store lacks."""
    if model is None and config.kind == "llm":
        if config.llm is None:
            raise ConfigError(
                "generator.llm: kind 'llm' needs a chat model (set generator.llm, or pass "
                "generator_model= to build_graph)"
            )
        model = make_chat_model(config.llm)
    if model is None:
        from parallel_rag.nodes.generate.extractive import ExtractiveGenerator
        from parallel_rag.nodes.generate.sentence_vectors import load_stored_sentence_embeddings

        loader = None
        if embeddings is not None and config.min_similarity is not None:
            model_name, device = embeddings.model, embeddings.device
            loader = lambda: load_embeddings(model_name, device)  # noqa: E731  (lazy: first answer)
            if base_dir is not None and config.sentence_vectors is not None:
                stored = Path(base_dir) / config.sentence_vectors
                loader = lambda: load_stored_sentence_embeddings(stored, model_name, device)  # noqa: E731
        return ExtractiveGenerator(
            max_sentences=config.max_sentences,
            embeddings=loader,
            min_similarity=config.min_similarity or 0.0,
            sentence_cache_size=config.sentence_cache_size,
        )
    from parallel_rag.nodes.generate.chat import ChatModelGenerator

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
    reads, is a ``ConfigError`` naming the field. A model that cannot be found is not: a missing
    model is a per-request failure, so it follows ``on_failure`` on each request (and is
    retried, so it may appear later).
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
    from parallel_rag.nodes.rerank.cross_encoder import CrossEncoderScorer, ModelFormatError
    from parallel_rag.nodes.rerank.scorers import (
        BudgetSettingError,
        EmbeddingSimilarityScorer,
        ExitNotTrainedError,
        ScorerUnavailableError,
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
