"""What the surfaces know of a graph ``build_graph`` compiled (``GraphProfile``,
``graph_profile``): the graph itself is ``StateGraph.compile()``'s own result; its runs check
their knobs and hold the stores' revisions in the graph (``graph/routing.py``,
``graph/steps.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from langchain_core.retrievers import BaseRetriever
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from parallel_rag.backends.base import warm_up_each
from parallel_rag.backends.embeddings import load_embeddings
from parallel_rag.backends.secrets import describe_error
from parallel_rag.graph.configuration import EmbeddingsConfig
from parallel_rag.graph.context import KnobScope
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


def with_profile(compiled: CompiledStateGraph, profile: GraphProfile) -> CompiledStateGraph:
    """``compiled`` (returned as it is), its profile kept for ``graph_profile``."""
    _PROFILES[compiled.builder] = profile
    return compiled
