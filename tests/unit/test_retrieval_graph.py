"""The retrieval graph (``build_retrieval_graph``, and the one ``build_graphs`` compiles beside
the answer graph): the
pipeline up to ``fuse`` as its own compiled graph, which never generates, returns exactly what
the answer graph fuses, and takes the same per-run knobs — offline, on in-test retrievers."""

from __future__ import annotations

import pytest
from parallel_rag.graph.builder import (
    build_graph,
    build_graphs,
    build_retrieval_graph,
    graphs_of,
    retrieval_graph_of,
)
from parallel_rag.graph.context import KnobError
from parallel_rag.graph.state import RetrievalResult
from small_graphs import compiled_graphs, two_lists

QUESTION = "What is the capital of France?"


def test_the_retrieval_graph_has_no_generate_node_and_returns_the_fused_documents(fakes):
    retrievers = two_lists(fakes)
    retrieval = build_retrieval_graph({"retrievers": []}, retrievers=retrievers)
    assert "generate" not in retrieval.get_graph().nodes
    assert {"retrieve", "fuse"} <= set(retrieval.get_graph().nodes)
    result = retrieval.invoke({"query": QUESTION})
    assert set(result) == set(RetrievalResult.__annotations__)
    assert [d["id"] for d in result["documents"]] == ["paris", "berlin", "lyon"]
    assert [b["retriever"] for b in result["branches"]] == ["a", "b"]
    assert set(result["timings"]) == {"retrieve", "fuse"}
    assert retrieval_graph_of(retrieval) is retrieval and graphs_of(retrieval) is None
    graphs = build_graphs({"retrievers": []}, answer=False, retrievers=retrievers)
    assert graphs.graph is graphs.retrieval and graphs.knob_scope.retrievers == ("a", "b")
    assert "generate" not in graphs.graph.get_graph().nodes


def test_the_answer_graph_is_its_retrieval_graph_plus_generate(fakes):
    graphs = compiled_graphs(two_lists(fakes), generator_model=fakes.ExplodingChatModel())
    graph, retrieval = graphs.graph, retrieval_graph_of(graphs)
    assert retrieval is graphs.retrieval and retrieval is not graph
    drawn = set(graph.get_graph().nodes) - set(retrieval.get_graph().nodes)
    assert drawn == {"generate"}
    fused = retrieval.invoke({"query": QUESTION})  # the exploding generator never runs here
    answered = build_graph({"retrievers": []}, retrievers=two_lists(fakes)).invoke(
        {"query": QUESTION}
    )
    assert fused["documents"] == answered["documents"]
    assert fused["queries"] == answered["queries"]

    def untimed(records):
        return [{k: v for k, v in r.items() if k != "latency_ms"} for r in records]

    assert untimed(fused["branches"]) == untimed(answered["branches"])


def test_the_retrieval_graph_takes_and_checks_the_run_knobs(fakes):
    retrievers = two_lists(fakes)
    retrieval = compiled_graphs(retrievers).retrieval
    only_b = retrieval.invoke({"query": QUESTION}, context={"retrievers": ["b"]})
    assert [b["retriever"] for b in only_b["branches"]] == ["b"]
    assert retrievers["a"].queries == []
    with pytest.raises(KnobError, match="retrievers: unknown retriever"):
        retrieval.invoke({"query": QUESTION}, context={"retrievers": ["nope"]})


async def test_mcp_search_runs_the_retrieval_graph_and_never_the_generator(fakes):
    from mcp import Client
    from parallel_rag.studio.mcp_server import build_server

    model = fakes.ExplodingChatModel()
    graphs = compiled_graphs(two_lists(fakes), generator_model=model)
    async with Client(build_server(graphs)) as client:
        searched = await client.call_tool("search", {"query": QUESTION, "top_k": 2})
        assert not searched.is_error
        assert [d["id"] for d in searched.structured_content["documents"]] == ["paris", "berlin"]
        assert model.calls == 0
        asked = await client.call_tool("ask", {"query": QUESTION, "top_k": 2})
        assert not asked.is_error and model.calls == 1  # ask does reach the generator
