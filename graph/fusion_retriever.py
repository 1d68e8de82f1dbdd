"""``ParallelFusionRetriever``: the retrieval graph as a LangChain ``BaseRetriever``.

It runs the retrieval graph (rewrite -> fan-out -> rerank -> fuse: given ``build_graphs``'
result, its retrieval graph, so ``generate`` is never part of the run),
returning the fused list as ``Document``s (``id``, content, the backend metadata plus
``fused_score``, ``fused_rank`` and ``sources``: one record per branch that found it). It takes
the place of ``EnsembleRetriever`` in an existing LCEL chain: same reciprocal rank fusion, plus
query views, per-branch reranking, failure policy and the per-branch account in every document.

Both entry points drive the graph's async path (``ainvoke``), where a branch crosses threads
once, for its lookup, and the event loop keeps its timeout: ``ainvoke`` on the caller's loop,
``invoke`` on an event loop of the calling thread's own, kept for its next call (the caller's
context and callbacks go along). A thread already running an event loop cannot wait on another
in place: there ``invoke`` runs the sync ``invoke``. The knobs (``context``, and a caller's
``configurable``) go to the run as they are: the graph maps and checks them (its entry router,
``graph/routing.py``).

Both start embedding the question for the dense branches before the graph runs (the graph's
``QueryPrefetch``): the encode releases the GIL and overlaps with the run's setup, input
validation and scheduling; the dense branch joins it when it gets there.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from parallel_rag.graph.builder import (
    ConfigSource,
    build_graphs,
    graphs_of,
    retrieval_graph_of,
)
from parallel_rag.graph.context import RAGContext, knobs_from
from parallel_rag.graph.state import MAX_TOP_K
from parallel_rag.nodes.fuse import DEFAULT_RRF_K
from pydantic import ConfigDict, Field

_CONFIGURABLE = "_parallel_rag_configurable"


class _ThreadLoop:
    """An event loop owned by one thread (closed when the thread's local storage goes)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        # the graph's sync nodes (rewrite, rerank, a hybrid branch) of this thread's runs: as
        # many threads as LangGraph's sync runner would start, created only when used
        self.loop.set_default_executor(
            ThreadPoolExecutor(max_workers=32, thread_name_prefix="parallel-rag-fusion")
        )

    def run(self, coro: Any) -> Any:
        """Run ``coro`` to its end on this loop, in a copy of the caller's context; if the wait
        is interrupted (KeyboardInterrupt) the run is cancelled before the error goes on."""
        task = self.loop.create_task(coro)
        try:
            return self.loop.run_until_complete(task)
        except BaseException:
            if not task.done():
                task.cancel()
                with suppress(BaseException):
                    self.loop.run_until_complete(task)
            raise

    def __del__(self) -> None:
        if self.pid == os.getpid() and not self.loop.is_closed():
            self.loop.close()


class _ThreadLoops(threading.local):
    current: _ThreadLoop | None = None

    def get(self) -> _ThreadLoop | None:
        """This thread's loop, or None when the thread is running an event loop already."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return None
        if self.current is None or self.current.pid != os.getpid():  # a fork starts anew
            self.current = _ThreadLoop()
        return self.current


_THREAD_LOOPS = _ThreadLoops()


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

    # ``Served``: ``build_graphs``' result (its retrieval graph runs), or any compiled graph (run
    # as it is); typed Any so that pydantic keeps the object itself
    graph: Any
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
        graphs = build_graphs(
            config,
            answer=False,
            retrievers=retrievers,
            rewriter_model=rewriter_model,
            base_dir=base_dir,
        )
        return cls(graph=graphs, **fields)

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

    def warm_up(self) -> dict[str, str]:
        """Load the embedding model and open every branch's index and store now, as the
        servers do before traffic (``RAGGraphs.warm_up``): a store of a million chunks
        takes longer to read than a branch's timeout. Returns the branches that could not be
        opened, {name: error}; their searches report it as before (a bare compiled graph:
        nothing to load, {})."""
        graphs = graphs_of(self.graph)
        return graphs.warm_up() if graphs is not None else {}

    # BaseRetriever.invoke does not hand the RunnableConfig to _get_relevant_documents; pass the
    # caller's ``configurable`` (the knobs' fallback) through as a private keyword.
    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any):  # noqa: A002
        configurable = ensure_config(config).get("configurable") or {}
        self._prefetch(input, configurable)
        return super().invoke(input, config, **{_CONFIGURABLE: configurable}, **kwargs)

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any):  # noqa: A002
        configurable = ensure_config(config).get("configurable") or {}
        self._prefetch(input, configurable)
        return await super().ainvoke(input, config, **{_CONFIGURABLE: configurable}, **kwargs)

    def _prefetch(self, query: Any, configurable: Mapping[str, Any]) -> int:
        """Start the question's encode for the dense branches the run will use (none when the
        knobs are wrong: the run reports that itself)."""
        graphs = graphs_of(self.graph)
        if graphs is None or graphs.prefetch is None or not graphs.prefetch.models:
            return 0
        knobs = None  # no knobs set: nothing to parse
        if self.context is not None or configurable:
            try:
                knobs = knobs_from(self.context, configurable)
            except Exception:  # noqa: BLE001 - the graph's entry refuses them with their message
                return 0
        return graphs.prefetch.start(query, knobs)

    def _request(self, query: str, top_k: int | None, filters: Mapping | None) -> dict:
        request: dict[str, Any] = {"query": query, "top_k": top_k or self.top_k}
        if filters is not None or self.filters is not None:
            request["filters"] = dict(filters if filters is not None else self.filters)
        if self.tenant is not None:
            request["tenant"] = self.tenant
        return request

    def _run(
        self,
        query: str,
        run_manager: CallbackManagerForRetrieverRun | AsyncCallbackManagerForRetrieverRun,
        top_k: int | None,
        filters: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> tuple[dict, RunnableConfig, dict]:
        config = RunnableConfig(
            callbacks=run_manager.get_child(),
            configurable=dict(kwargs.get(_CONFIGURABLE) or {}),
        )
        extra = {"context": self.context} if self.context is not None else {}
        return self._request(query, top_k, filters), config, extra

    async def _fused(self, request: dict, config: RunnableConfig, extra: dict) -> list[Document]:
        result = await retrieval_graph_of(self.graph).ainvoke(request, config, **extra)
        return fused_to_documents(result["documents"])

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        top_k: int | None = None,
        filters: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        request, config, extra = self._run(query, run_manager, top_k, filters, kwargs)
        loop = _THREAD_LOOPS.get()
        if loop is not None:
            return loop.run(self._fused(request, config, extra))
        result = retrieval_graph_of(self.graph).invoke(request, config, **extra)
        return fused_to_documents(result["documents"])

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        top_k: int | None = None,
        filters: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        request, config, extra = self._run(query, run_manager, top_k, filters, kwargs)
        return await self._fused(request, config, extra)
