"""``ParallelFusionRetriever``: the graph's retrieval half as a LangChain ``BaseRetriever``.

It runs rewrite -> fan-out -> rerank -> fuse and stops before ``generate``, returning the fused
list as ``Document``s (``id``, content, the backend metadata plus ``fused_score``,
``fused_rank`` and ``sources``: one record per branch that found it). It takes the place of
``EnsembleRetriever`` in an existing LCEL chain: same reciprocal rank fusion, plus query views,
per-branch reranking, failure policy and the per-branch account in every document.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import closing
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import run_in_executor
from langgraph.graph.state import CompiledStateGraph
from parallel_rag.graph.builder import ConfigSource, build_graph
from parallel_rag.graph.context import RAGContext
from parallel_rag.graph.state import MAX_TOP_K
from parallel_rag.nodes.fuse import DEFAULT_RRF_K
from pydantic import ConfigDict, Field

_CONFIGURABLE = "_parallel_rag_configurable"


def fused_to_documents(fused: Sequence[Mapping[str, Any]]) -> list[Document]:
    """Fused records as LangChain documents, the fusion account kept in ``metadata``."""
    return [
        Document(
            id=doc["id"],
            page_content=doc["content"],
            metadata={
                **doc["metadata"],
                "fused_score": doc["fused_score"],
                "fused_rank": doc["fused_rank"],
                "sources": [dict(source) for source in doc["sources"]],
            },
        )
        for doc in fused
    ]


class ParallelFusionRetriever(BaseRetriever):
    """Parallel multi-retriever search with reciprocal rank fusion, as one retriever.

    ``top_k`` fused documents come back (default 5); ``filters``/``tenant`` apply to every
    branch; ``context`` holds per-run knobs (``RAGContext``), and ``.with_config(configurable=
    {...})`` sets the same knobs per call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    graph: CompiledStateGraph  # from build_graph
    top_k: int = Field(default=5, ge=1, le=MAX_TOP_K)
    filters: dict[str, Any] | None = None
    tenant: str | None = None
    context: RAGContext | None = None

    @classmethod
    def from_config(
        cls,
        config: ConfigSource = None,
        *,
        retrievers: Mapping[str, BaseRetriever] | None = None,
        rewriter_model: BaseChatModel | None = None,
        base_dir: str | os.PathLike | None = None,
        **fields: Any,
    ) -> ParallelFusionRetriever:
        """From a pipeline configuration (YAML path, mapping, ``PipelineConfig`` or None)."""
        graph = build_graph(
            config, retrievers=retrievers, rewriter_model=rewriter_model, base_dir=base_dir
        )
        return cls(graph=graph, **fields)

    @classmethod
    def from_retrievers(
        cls,
        retrievers: Mapping[str, BaseRetriever] | Sequence[BaseRetriever],
        *,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        c: int = DEFAULT_RRF_K,
        rewriter_model: BaseChatModel | None = None,
        pipeline: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> ParallelFusionRetriever:
        """``EnsembleRetriever(retrievers=[...], weights=[...], c=60)`` in our terms: 2 to 4
        retrievers (a list is named ``retriever_0``, ``retriever_1``, ...), their RRF weights
        and constant. ``pipeline`` adds other configuration (rewriter, reranker, on_failure)."""
        if not isinstance(retrievers, Mapping):
            retrievers = {f"retriever_{i}": r for i, r in enumerate(retrievers)}
        names = list(retrievers)
        if weights is not None and not isinstance(weights, Mapping):
            weights = list(weights)
            if len(weights) != len(names):
                raise ValueError(f"weights: {len(weights)} weights for {len(names)} retrievers")
            weights = dict(zip(names, weights, strict=True))
        config = dict(pipeline or {})
        # EnsembleRetriever's fusion: RRF with equal weights, unless ``pipeline`` says otherwise
        config["fusion"] = {
            "method": "rrf",
            "dense_weight": 1.0,
            **config.get("fusion", {}),
            "k": c,
            "weights": dict(weights or {}),
        }
        return cls.from_config(
            config, retrievers=retrievers, rewriter_model=rewriter_model, **fields
        )

    # BaseRetriever.invoke does not hand the RunnableConfig to _get_relevant_documents; pass the
    # caller's ``configurable`` (the knobs' fallback) through as a private keyword.
    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any):  # noqa: A002
        configurable = ensure_config(config).get("configurable") or {}
        return super().invoke(input, config, **{_CONFIGURABLE: configurable}, **kwargs)

    # One path: the graph's nodes are sync underneath, so async callers get ``invoke`` in a
    # worker thread (what LangChain's Runnable does by default).
    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any):  # noqa: A002
        return await run_in_executor(config, self.invoke, input, config, **kwargs)

    def _request(self, query: str, top_k: int | None, filters: Mapping | None) -> dict:
        request: dict[str, Any] = {"query": query, "top_k": top_k or self.top_k}
        if filters is not None or self.filters is not None:
            request["filters"] = dict(filters if filters is not None else self.filters)
        if self.tenant is not None:
            request["tenant"] = self.tenant
        return request

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        top_k: int | None = None,
        filters: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        config = RunnableConfig(
            callbacks=run_manager.get_child(),
            configurable=dict(kwargs.get(_CONFIGURABLE) or {}),
        )
        extra = {"context": self.context} if self.context is not None else {}
        request = self._request(query, top_k, filters)
        # stop after ``fuse``: leaving the stream ends the run before ``generate`` starts
        with closing(self.graph.stream(request, config, stream_mode="updates", **extra)) as run:
            for update in run:
                if "fuse" in update:
                    return fused_to_documents(update["fuse"]["documents"])
        return []
