"""``RAGGraphs``: what ``build_graphs`` compiled for one configuration, handed to the surfaces
explicitly: the graph (``StateGraph.compile()``'s own result), its retrieval graph (the same
components up to ``fuse``) and what a server needs to know beyond LangGraph's API (the per-run
knobs the graphs honour, what ``warm_up`` loads). A surface given a bare compiled graph runs it
as it is: its runs still check their knobs and hold the stores' revisions in the graph
(``graph/routing.py``, ``graph/steps.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from langchain_core.retrievers import BaseRetriever
from langgraph.graph.state import CompiledStateGraph
from parallel_rag.backends.base import warm_up_each
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.shared.secrets import describe_error
from parallel_rag.graph.configuration import EmbeddingsConfig
from parallel_rag.graph.context import KnobScope
from parallel_rag.graph.routing import QueryPrefetch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RAGGraphs:
    """The graphs of one configuration and what the surfaces need to know of them: ``graph``
    (the answer graph, or the retrieval graph when only that was built), ``retrieval`` (the
    pipeline up to ``fuse``, for surfaces that want documents only; ``graph`` itself when it is
    the retrieval graph), the per-run knobs they can honour (servers refuse the others before a
    run starts), the embedding model a first request would otherwise load, and the branches."""

    graph: CompiledStateGraph
    retrieval: CompiledStateGraph
    knob_scope: KnobScope
    embeddings: EmbeddingsConfig | None = None  # the model some component loads on first use
    prefetch: QueryPrefetch | None = None  # starts a request's query encode before the graph
    retrievers: tuple[tuple[str, BaseRetriever], ...] = ()  # (branch name, retriever)

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


Served = RAGGraphs | CompiledStateGraph
"""What a surface serves: graphs ``build_graphs`` compiled, or any compiled graph."""


def graphs_of(served: Served) -> RAGGraphs | None:
    """``served`` when it is a ``RAGGraphs``; None for a bare compiled graph."""
    return served if isinstance(served, RAGGraphs) else None


def graph_of(served: Served) -> CompiledStateGraph:
    """The graph to answer with: ``RAGGraphs.graph``, or the compiled graph itself."""
    return served.graph if isinstance(served, RAGGraphs) else served


def retrieval_graph_of(served: Served) -> CompiledStateGraph:
    """The graph a documents-only surface runs: ``RAGGraphs.retrieval``; a bare compiled graph
    as it is (its ``documents`` are read)."""
    return served.retrieval if isinstance(served, RAGGraphs) else served
