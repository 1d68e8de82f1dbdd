"""Graphs over in-memory retrievers, shared by the unit tests of the graph's semantics, its run
context and the fusion retriever."""

from __future__ import annotations

from parallel_rag.graph.builder import build_graph, build_graphs


def graph_of(retrievers, config=None, **kwargs):
    """A graph over ``retrievers`` (name -> retriever) and nothing from configuration files."""
    return build_graph({"retrievers": [], **(config or {})}, retrievers=retrievers, **kwargs)


def two_lists(fakes):
    """Two lexical retrievers with overlapping, differently ordered results."""
    a = fakes.ListRetriever(
        docs=[fakes.doc("paris", "Paris is the capital of France."), fakes.doc("lyon", "Lyon.")]
    )
    b = fakes.ListRetriever(
        docs=[
            fakes.doc("berlin", "Berlin is in Germany."),
            fakes.doc("paris", "Paris is the capital of France."),
        ]
    )
    return {"a": a, "b": b}


def compiled_graphs(retrievers, config=None, **kwargs):
    """``graph_of``'s answer graph with its retrieval graph and what the surfaces need
    (``build_graphs``' ``RAGGraphs``)."""
    return build_graphs({"retrievers": [], **(config or {})}, retrievers=retrievers, **kwargs)
