"""The request as the stock graph takes it (``graph/request.py``): LangGraph writes the input
into the state, the entry router checks and shapes it before any node, the run's first task
writes that shape, and on a thread the run's last node clears the request fields, so each turn
reads only what it was given. Offline, on in-test retrievers."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph
from parallel_rag.graph.builder import build_graphs
from pydantic import ValidationError
from small_graphs import graph_of, two_lists

QUESTION = "What is the capital of France?"


def test_build_graph_returns_state_graph_compile_s_own_result(fakes):
    graph = graph_of(two_lists(fakes))
    assert type(graph) is CompiledStateGraph
    assert type(build_graphs({"retrievers": []}, retrievers=two_lists(fakes)).retrieval) is (
        CompiledStateGraph
    )


@pytest.mark.parametrize("answer", [True, False])
def test_a_thread_turn_reads_only_what_it_was_given(fakes, answer):
    """Turn one sets ``top_k``; turn two, a conversation as Studio's chat sends it, does not:
    it runs with the default, on its own question, and the thread keeps every user question
    (the retrieval graph too, which writes no answer)."""
    graphs = build_graphs(
        {"retrievers": []}, retrievers=two_lists(fakes), checkpointer=InMemorySaver(),
        answer=answer,
    )  # fmt: skip
    graph, thread = graphs.graph, {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"query": QUESTION, "top_k": 1}, thread)
    assert len(first["documents"]) == 1
    second = graph.invoke({"messages": [{"role": "user", "content": "And Lyon?"}]}, thread)
    assert second["resolution"]["question"] == "And Lyon?"
    assert len(second["documents"]) == 3  # top_k 5 again: two lists, three documents
    state = graph.get_state(thread).values
    asked = [m.text for m in state["messages"] if isinstance(m, HumanMessage)]
    assert asked == [QUESTION, "And Lyon?"]
    assert state["query"] is None and state["top_k"] is None and state["filters"] is None


def test_a_bad_turn_on_a_thread_is_refused_and_the_next_one_runs(fakes):
    graph = graph_of(two_lists(fakes), checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"query": QUESTION}, thread)
    with pytest.raises(ValidationError, match="top_k"):
        graph.invoke({"query": "And Lyon?", "top_k": 0}, thread)
    with pytest.raises(ValidationError, match="messages"):
        graph.invoke({"messages": [{"role": "robot", "content": "hi"}]}, thread)
    result = graph.invoke({"query": "And Lyon?"}, thread)
    assert [m.type for m in result["messages"]] == ["human", "ai", "human", "ai"]


def test_the_question_is_no_node_s_message_in_a_messages_stream(fakes):
    """The first task writes the question into the conversation; a messages stream (Studio's
    chat) still shows the answer only, as when START wrote it."""
    graph = graph_of(two_lists(fakes))
    streamed = list(graph.stream({"query": QUESTION}, stream_mode="messages"))
    assert [(m.type, meta["langgraph_node"]) for m, meta in streamed] == [("ai", "generate")]


def test_a_chat_prompt_value_is_a_conversation(fakes):
    from langchain_core.prompts import ChatPromptTemplate

    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | graph_of(two_lists(fakes))
    result = chain.invoke({"q": QUESTION})
    assert result["resolution"]["question"] == QUESTION and result["documents"]
