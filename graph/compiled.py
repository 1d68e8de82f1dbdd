"""The compiled graph ``build_graph`` returns (``RAGGraph``) and what the surfaces know of it
(``GraphProfile``, ``graph_profile``).

A ``RAGGraph`` is LangGraph's ``CompiledStateGraph`` whose runs check their per-run knobs once,
as they start: the ``context`` a caller passes (LangGraph's runtime context, what Studio's
context form sends) and, for callers that only speak ``RunnableConfig`` (LangServe, LCEL
``.with_config``), the knobs in ``configurable``, mapped to the context here and nowhere else
(``knobs_from``). Nodes read them from ``runtime.context``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from parallel_rag.backends.base import warm_up_each
from parallel_rag.backends.embeddings import load_embeddings
from parallel_rag.backends.revisions import hold_stores_for_run, run_scope
from parallel_rag.backends.secrets import describe_error
from parallel_rag.graph.configuration import EmbeddingsConfig
from parallel_rag.graph.context import KnobScope, RAGContext, knobs_from
from parallel_rag.graph.routing import QueryPrefetch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GraphProfile:
    """What the surfaces need to know about a graph ``build_graph`` compiled, beyond LangGraph's
    own API: the per-run knobs it can honour (servers refuse the others before a run starts),
    the embedding model its first request would otherwise load, and its retrieval graph (the
    same pipeline up to ``fuse``, for surfaces that want documents only)."""

    knob_scope: KnobScope
    embeddings: EmbeddingsConfig | None = None  # the model some component loads on first use
    prefetch: QueryPrefetch | None = None  # starts a request's query encode before the graph
    retrievers: tuple[tuple[str, BaseRetriever], ...] = ()  # (branch name, retriever)
    retrieval: CompiledStateGraph | None = None  # the retrieval graph (itself, for that graph)

    def warm_up(self) -> dict[str, str]:
        """Load what the first request would otherwise load inside its branch timeouts: the
        embedding model, and every branch's index or store (``warm_up`` of our backends; a
        store of a million chunks takes longer to read than a branch's default timeout).
        Servers and the CLI call it before the first request.

        A branch that cannot be opened (no index yet, a server down) does not stop the
        others or the caller: it is logged, returned as {branch: error}, and its searches
        report it as they would have."""
        if self.embeddings is not None:
            load_embeddings(self.embeddings.model, self.embeddings.device)
        failed = {
            name: describe_error(error)  # secrets redacted
            for name, error in warm_up_each(self.retrievers).items()
        }
        for name, error in failed.items():
            logger.warning("retriever '%s' could not be opened ahead: %s", name, error)
        return failed


# Keyed by the graph's StateGraph, which every copy of the compiled graph shares (``with_config``,
# the per-run copies the LangGraph server makes); weak, so a dropped graph takes its profile along.
_PROFILES: WeakKeyDictionary[StateGraph, GraphProfile] = WeakKeyDictionary()


def graph_profile(graph: CompiledStateGraph) -> GraphProfile | None:
    """The profile of a graph ``build_graph`` or ``build_retrieval_graph`` compiled (or of a
    copy of it); None for any other compiled graph."""
    return _PROFILES.get(graph.builder)


def retrieval_graph_of(graph: CompiledStateGraph) -> CompiledStateGraph:
    """The graph a documents-only surface runs: the retrieval graph of a graph we compiled
    (itself when it is one); any other graph as it is (its ``documents`` are read)."""
    profile = graph_profile(graph)
    if profile is None or profile.retrieval is None:
        return graph
    return profile.retrieval.copy({"config": graph.config}) if graph.config else profile.retrieval


class RAGGraph(CompiledStateGraph):
    """A compiled pipeline whose every run starts with its knobs parsed and checked against
    what the pipeline can honour (a ``KnobError`` naming the field, before any node runs).
    ``invoke``, ``batch``, ``stream_events`` and the servers all run through ``stream`` or
    ``astream``, so this is the one place a run's knobs are set, and where a run starts
    reading one revision of each store (``backends.revisions.run_scope``)."""

    def run_context(self, config: RunnableConfig | None, context: Any) -> RAGContext:
        """The run's knobs: ``context`` (a dict is validated as LangGraph would: a pydantic
        error naming the field), over the knobs in ``configurable``."""
        if isinstance(context, Mapping):
            context = RAGContext(**context)
        configurable = {
            **((self.config or {}).get("configurable") or {}),  # with_config(configurable=...)
            **((config or {}).get("configurable") or {}),
        }
        knobs = knobs_from(context, configurable)
        profile = graph_profile(self)
        if profile is not None:
            profile.knob_scope.check(knobs)
        return knobs

    def hold_stores(self) -> None:
        """Inside the run's scope: its stores' live revisions, taken now for the whole run."""
        profile = graph_profile(self)
        if profile is not None:
            hold_stores_for_run(retriever for _, retriever in profile.retrievers)

    def stream(
        self, input: Any, config: RunnableConfig | None = None, *, context: Any = None, **kwargs
    ) -> Iterator[Any]:
        knobs = self.run_context(config, context)
        with run_scope():  # every search of a store in this run reads one revision of it
            self.hold_stores()
            yield from super().stream(input, config, context=knobs, **kwargs)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, *, context: Any = None, **kwargs
    ) -> AsyncIterator[Any]:
        knobs = self.run_context(config, context)
        with run_scope():
            await asyncio.to_thread(self.hold_stores)  # may open a new revision: off the loop
            async with aclosing(super().astream(input, config, context=knobs, **kwargs)) as run:
                async for chunk in run:
                    yield chunk


def as_rag_graph(compiled: CompiledStateGraph, profile: GraphProfile) -> RAGGraph:
    """``compiled`` as a ``RAGGraph`` (what ``copy`` would make of it), with its profile."""
    attrs = {k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"}
    graph = RAGGraph(**attrs)
    _PROFILES[graph.builder] = profile
    return graph
