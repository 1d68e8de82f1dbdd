"""Embedded in a LangChain app, on the real example index (MiniLM + Qdrant local + BM25):
the compiled graph composes in LCEL, and ``ParallelFusionRetriever`` replaces
``EnsembleRetriever`` in a small LCEL RAG chain."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from langchain_classic.retrievers import EnsembleRetriever
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from parallel_rag.graph.components import make_retriever
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever

pytestmark = pytest.mark.integration

QUESTION = "Who wrote the first algorithm for the Analytical Engine?"
GOLD = "ada-lovelace.md"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _sources(result: dict) -> list[str]:
    return [d["metadata"].get("source", "") for d in result["documents"]]


def test_prompt_pipe_graph_with_config_and_batch(example_graph):
    """A chat prompt's value goes into the graph as its conversation (LangGraph reads its
    ``messages``); a string prompt's value is not a mapping and LangGraph refuses it, so a
    string prompt is piped through ``{"query": ...}`` first (the graph is StateGraph.compile()'s
    own result: no replaced START node turns one into a request)."""
    chain = ChatPromptTemplate.from_messages([("human", "{question}")]) | example_graph
    result = chain.invoke({"question": QUESTION})
    assert result["answer"] and result["citations"]
    assert any(s.endswith(GOLD) for s in _sources(result))
    assert {b["retriever"] for b in result["branches"]} == {"lexical", "dense"}

    lexical = chain.with_config(
        configurable={"retrievers": ["lexical"], "retriever_top_k": 3}, tags=["lcel"]
    ).invoke({"question": QUESTION})
    assert [(b["retriever"], b["hits"]) for b in lexical["branches"]] == [("lexical", 3)]

    results = chain.batch([{"question": QUESTION}, {"question": "What is an inverted index?"}])
    assert len(results) == 2 and all(r["answer"] for r in results)
    assert any("inverted-index" in s for s in _sources(results[1]))

    text = PromptTemplate.from_template("{question}")
    as_query = text | (lambda value: {"query": value.to_string()}) | example_graph
    assert any(s.endswith(GOLD) for s in _sources(as_query.invoke({"question": QUESTION})))


async def test_astream_events_shows_every_node_and_the_result(example_graph):
    started, ended, final = [], [], None
    async for event in example_graph.astream_events({"query": QUESTION}, version="v2"):
        if event["event"] == "on_chain_start":
            started.append(event["name"])
        elif event["event"] == "on_chain_end":
            ended.append(event["name"])
            if event["name"] == example_graph.get_name():
                final = event["data"]["output"]
    assert {"retrieve", "fuse", "generate"} <= set(started)
    assert ended.count("retrieve") >= 2  # one task per branch
    assert final is not None and final["answer"] and final["documents"]


def _rag_chain(retriever):
    """A small LCEL RAG chain; the "model" echoes its prompt so the test can read the context."""
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from the context only.\n\n{context}"), ("human", "{question}")]
    )

    def format_docs(docs):
        return "\n\n".join(f"[{n}] {d.page_content}" for n, d in enumerate(docs, start=1))

    echo_model = RunnableLambda(lambda value: value.to_string())
    return (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | echo_model
        | StrOutputParser()
    )


async def test_parallel_fusion_retriever_replaces_ensemble_retriever_in_a_chain(example_index):
    config, base_dir, _ = example_index
    lexical, dense = (make_retriever(entry, config, base_dir) for entry in config.retrievers)

    ensemble = EnsembleRetriever(retrievers=[lexical, dense], weights=[0.5, 0.5], id_key=None)
    ours = ParallelFusionRetriever.from_retrievers(
        {"lexical": lexical, "dense": dense}, weights=[0.5, 0.5], top_k=5
    )
    before = _rag_chain(ensemble).invoke(QUESTION)
    after = _rag_chain(ours).invoke(QUESTION)
    assert "Ada Lovelace" in after and "\n[5] " in after and "\n[6] " not in after

    # the same reciprocal rank fusion over the same candidates: the same top documents
    expected = [d.page_content for d in ensemble.invoke(QUESTION)][:5]
    fused = ours.invoke(QUESTION)
    assert [d.page_content for d in fused] == expected
    assert all(f"[{n}] {text}" in before for n, text in enumerate(expected, start=1))
    for doc in fused:
        assert doc.id and doc.metadata["fused_rank"] >= 1
        assert {s["retriever"] for s in doc.metadata["sources"]} <= {"lexical", "dense"}
        assert all("rank" in s and "score" in s for s in doc.metadata["sources"])

    # async, and per-call knobs through with_config
    adocs = await ours.with_config(configurable={"retrievers": ["dense"]}).ainvoke(QUESTION)
    assert adocs and all(s["retriever"] == "dense" for d in adocs for s in d.metadata["sources"])


def test_the_example_script_runs_both_ways(example_index):
    _, base_dir, _ = example_index
    spec = importlib.util.spec_from_file_location("langchain_app", EXAMPLES / "langchain_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = module.main(["--base-dir", str(base_dir)])
    assert report["answer"]
    assert report["lexical_only_branches"] == ["q0:lexical"]
    assert len(report["batch_answers"]) == 2
    assert {"retrieve", "fuse"} <= set(report["events"])
    assert "[1] (" in report["chain_output"] and "transistor" in report["chain_output"].lower()
