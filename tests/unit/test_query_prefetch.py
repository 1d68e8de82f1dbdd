"""A request's question is embedded ahead of its dense branches (``prefetch_query``, started by
``ParallelFusionRetriever`` and the graph's entry): the branch joins that one computation (or
takes it over if it has not started), a failed prefetch leaves the branch to embed the text
itself, and prefetching stays within a fixed number of threads and a bounded cache."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from parallel_rag.backends.encoders import embeddings as shared
from parallel_rag.backends.encoders.embeddings import (
    PREFETCH_LIMIT,
    PREFETCH_WORKERS,
    QueryOnceEmbeddings,
    load_embeddings,
    prefetches_in_flight,
)
from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeRetriever, QdrantEdgeSettings
from parallel_rag.backends.qdrant_edge.writes import write_chunks as write_edge
from parallel_rag.graph.builder import build_graphs
from parallel_rag.graph.context import RAGContext
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever
from parallel_rag.graph.routing import QueryPrefetch
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.nodes.retrieve import RetrievalBranch

DIM = 16
WORDS = ["bridge", "comet", "river", "engine", "tower", "planet", "steel", "orbit"]
QUESTION = "Which bridge crosses the river?"
PREFETCH_THREAD = "parallel-rag-prefetch"


def vector(text: str) -> list[float]:
    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().split():
        v[hash(word.strip("?.,")) % DIM] += 1
    v[-1] += 0.01
    return (v / np.linalg.norm(v)).tolist()


class GatedEmbedder(Embeddings):
    """Bag-of-words vectors. Records who embeds each query text; a text listed in ``gates``
    waits for its event before it is embedded, one in ``fail_once`` fails its first time."""

    def __init__(self, gates=(), fail_once=()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.entered: dict[str, threading.Event] = {}
        self.gates = {text: threading.Event() for text in gates}
        self.fail_once = set(fail_once)
        self.lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        with self.lock:
            self.calls.append((text, threading.current_thread().name))
            self.entered.setdefault(text, threading.Event()).set()
            fail = text in self.fail_once
            self.fail_once.discard(text)
        if text in self.gates:
            assert self.gates[text].wait(10), "gate never opened"
        if fail:
            raise RuntimeError("encoder down")
        return vector(text)

    def count(self, text: str) -> int:
        return Counter(t for t, _ in self.calls)[text]

    def wait_entered(self, text: str) -> None:
        with self.lock:
            event = self.entered.setdefault(text, threading.Event())
        assert event.wait(10), f"{text!r} was never embedded"


def drained(model: QueryOnceEmbeddings) -> None:
    """Wait (up to 10 s) until no prefetch is queued or running."""
    deadline = time.monotonic() + 10
    while prefetches_in_flight() or model.in_progress:
        assert time.monotonic() < deadline, "prefetches still in flight"
        time.sleep(0.005)


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(PREFETCH_THREAD)]


# ------------------------------------------------------------------ the model's prefetch


def test_a_caller_joins_the_running_prefetch_instead_of_embedding_again():
    inner = GatedEmbedder(gates=["q"])
    model = QueryOnceEmbeddings(inner)
    assert model.prefetch_query("q") is True
    inner.wait_entered("q")  # the prefetch thread is embedding it
    got: list[list[float]] = []
    waiter = threading.Thread(target=lambda: got.append(model.embed_query("q")))
    waiter.start()
    waiter.join(0.05)
    assert waiter.is_alive()  # waiting for the prefetch, not done on its own
    inner.gates["q"].set()
    waiter.join(10)
    assert got == [vector("q")]
    assert inner.count("q") == 1
    assert inner.calls[0][1].startswith(PREFETCH_THREAD)
    assert model.prefetch_query("q") is False  # kept: nothing to start
    assert model.embed_query("q") == vector("q") and inner.count("q") == 1
    drained(model)


def test_a_prefetch_still_queued_is_taken_over_by_the_caller():
    busy = [f"busy {i}" for i in range(PREFETCH_WORKERS)]
    inner = GatedEmbedder(gates=busy)
    model = QueryOnceEmbeddings(inner)
    try:
        for text in busy:
            assert model.prefetch_query(text)
        for text in busy:
            inner.wait_entered(text)  # every prefetch thread is taken
        assert model.prefetch_query("q") is True  # queued behind them
        assert model.embed_query("q") == vector("q")  # not stuck behind the busy threads
        assert inner.calls[-1] == ("q", threading.current_thread().name)
    finally:
        for gate in inner.gates.values():
            gate.set()
    drained(model)  # the queued prefetch ran, found its text taken and did nothing
    assert inner.count("q") == 1
    assert model.embed_query("q") == vector("q") and inner.count("q") == 1


def test_a_failed_prefetch_falls_back_to_a_normal_encode():
    inner = GatedEmbedder(gates=["q"], fail_once=["q"])
    model = QueryOnceEmbeddings(inner)
    assert model.prefetch_query("q") is True
    inner.wait_entered("q")
    got: list[list[float]] = []
    waiter = threading.Thread(target=lambda: got.append(model.embed_query("q")))
    waiter.start()
    waiter.join(0.05)
    inner.gates["q"].set()  # the prefetch fails now; the waiter embeds the text itself
    waiter.join(10)
    assert got == [vector("q")]
    assert [name.startswith(PREFETCH_THREAD) for _, name in inner.calls] == [True, False]
    drained(model)
    assert model.in_progress == 0 and model.kept == 1


def test_a_failed_prefetch_nobody_waited_for_leaves_nothing_behind():
    inner = GatedEmbedder(fail_once=["q"])
    model = QueryOnceEmbeddings(inner)
    assert model.prefetch_query("q") is True
    drained(model)
    assert model.in_progress == 0 and model.kept == 0
    assert model.embed_query("q") == vector("q") and inner.count("q") == 2


def test_prefetching_is_bounded_in_threads_work_in_flight_and_memory():
    texts = [f"text {i}" for i in range(PREFETCH_LIMIT + 5)]
    inner = GatedEmbedder(gates=texts)
    model = QueryOnceEmbeddings(inner, size=4)
    try:
        started = [model.prefetch_query(t) for t in texts]
        assert started == [True] * PREFETCH_LIMIT + [False] * 5  # the rest are not queued
        assert prefetches_in_flight() == PREFETCH_LIMIT
        assert len(prefetch_threads()) <= PREFETCH_WORKERS
    finally:
        for gate in inner.gates.values():
            gate.set()
    drained(model)
    assert prefetches_in_flight() == 0 and model.in_progress == 0
    assert model.kept == 4  # unused prefetched vectors stay within the cache's size
    for _ in range(3):  # many more requests later: the same threads, nothing accumulates
        for i in range(50):
            model.prefetch_query(f"later {i}")
            drained(model)
    assert len(prefetch_threads()) <= PREFETCH_WORKERS
    assert model.kept == 4 and model.in_progress == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_prefetches_on_threads_of_its_own():
    inner = GatedEmbedder()
    model = QueryOnceEmbeddings(inner)
    assert model.prefetch_query("in the parent")
    drained(model)  # the parent's prefetch threads exist now; a child inherits none of them
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 1
        try:
            started = model.prefetch_query("in the child")
            same = model.embed_query("in the child") == vector("in the child")
            code = 0 if started and same and inner.count("in the child") == 1 else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's prefetch never finished")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


# ------------------------------------------------------------------ which branches get one


def edge_branch(name: str = "edge") -> RetrievalBranch:
    return RetrievalBranch(
        name=name, index=0, retriever=QdrantEdgeRetriever(), kind="dense", on_failure="warn"
    )


@pytest.fixture
def shared_model(monkeypatch):
    """The shared model (``load_embeddings``) over a gated embedder, not loaded yet; every
    ``prefetch_query`` call and its answer recorded."""
    inner = GatedEmbedder()
    model = QueryOnceEmbeddings(inner)
    monkeypatch.setattr(shared, "_load", lambda name, device, runtime: model)
    monkeypatch.setattr(shared, "_loaded", {})
    model.prefetched = []
    prefetch = model.prefetch_query

    def recorded(text: str) -> bool:
        started = prefetch(text)
        model.prefetched.append((text, started))
        return started

    model.prefetch_query = recorded
    yield model
    drained(model)


def test_the_original_view_is_prefetched_only_when_the_run_searches_it(shared_model):
    load_embeddings()
    dense = QueryPrefetch([edge_branch()])
    assert dense.start("  Which bridge?  ") == 1
    assert shared_model.prefetched == [("Which bridge?", True)]  # the view's stripped text
    assert dense.start("Which bridge?") == 0  # being embedded or kept: not again
    assert dense.start("   ") == 0 and dense.start(None) == 0 and dense.start("x" * 5000) == 0
    assert dense.start("Not this one", RAGContext(retrievers=["other"])) == 0
    lexical = RetrievalBranch(
        name="words", index=1, retriever=QdrantEdgeRetriever(), kind="lexical", on_failure="warn"
    )
    assert QueryPrefetch([lexical]).start("Lexical only") == 0
    no_original = QueryPrefetch([edge_branch()], has_rewriter=True, include_original=False)
    assert no_original.start("Rewritten away") == 0
    assert no_original.start("Rewriter off", RAGContext(rewriter="none")) == 1
    assert QueryPrefetch([edge_branch()], has_rewriter=True).start("Kept original") == 1
    texts = [text for text, _ in shared_model.prefetched]
    assert "Not this one" not in texts and "Rewritten away" not in texts


def test_nothing_is_prefetched_before_the_model_is_loaded(shared_model):
    assert QueryPrefetch([edge_branch()]).start(QUESTION) == 0
    assert shared_model.prefetched == []
    load_embeddings()
    assert QueryPrefetch([edge_branch()]).start(QUESTION) == 1


# ------------------------------------------------------------------ in the product's paths


@pytest.fixture
def edge_graph(shared_model, tmp_path, fakes):
    """A graph over a Qdrant Edge branch (the shared model) and an in-test lexical branch."""
    texts = [f"The {a} and the {b}" for a in WORDS for b in WORDS if a != b]
    write_edge(
        QdrantEdgeSettings(path="edge"),
        tmp_path,
        ids=[f"chunk-{i}" for i in range(len(texts))],
        texts=texts,
        metadatas=[{"file_id": "f", "source": "s.md"} for _ in texts],
        vectors=[vector(t) for t in texts],
        replace_file_ids=[],
        sentences=GeneratorSentences("bundled"),
    )
    config = {
        "retrievers": [
            {"name": "edge", "backend": "qdrant_edge", "backend_config": {"path": "edge"}}
        ],
        "generator": {"min_similarity": None},
    }
    words = fakes.ListRetriever(docs=[fakes.doc("chunk-1", "The bridge and the river", 1.0)])
    graphs = build_graphs(config, base_dir=tmp_path, retrievers={"words": words})
    graphs.warm_up()  # what servers do before traffic: loads the shared model
    return graphs


def test_the_fusion_retriever_prefetches_and_the_branch_joins_it(edge_graph, shared_model):
    docs = ParallelFusionRetriever(graph=edge_graph, top_k=3).invoke(QUESTION)
    # the dense branch answered (where its documents rank against the lexical one's lone hit
    # is fusion's business, not this test's)
    assert any(s["retriever"] == "edge" for d in docs for s in d.metadata["sources"])
    assert shared_model.prefetched[0] == (QUESTION, True)  # before the graph ran
    assert (QUESTION, True) not in shared_model.prefetched[1:]  # the entry found it started
    assert shared_model.inner.count(QUESTION) == 1


async def test_the_async_fusion_retriever_prefetches_too(edge_graph, shared_model):
    docs = await ParallelFusionRetriever(graph=edge_graph, top_k=3).ainvoke(QUESTION)
    assert docs
    assert shared_model.prefetched[0] == (QUESTION, True)
    assert shared_model.inner.count(QUESTION) == 1


def test_a_plain_graph_run_prefetches_at_its_entry(edge_graph, shared_model):
    result = edge_graph.graph.invoke({"query": f"  {QUESTION} ", "top_k": 3})
    assert {b["status"] for b in result["branches"]} == {"ok"}
    assert shared_model.prefetched == [(QUESTION, True)]
    assert shared_model.inner.count(QUESTION) == 1


def test_a_run_without_its_dense_branch_prefetches_nothing(edge_graph, shared_model):
    retriever = ParallelFusionRetriever(graph=edge_graph, top_k=3)
    docs = retriever.invoke(QUESTION, {"configurable": {"retrievers": ["words"]}})
    assert [d.id for d in docs] == ["chunk-1"]
    assert shared_model.prefetched == [] and shared_model.inner.calls == []


def test_wrong_knobs_start_nothing_and_fail_as_before(edge_graph, shared_model):
    retriever = ParallelFusionRetriever(graph=edge_graph, top_k=3)
    with pytest.raises(Exception, match="unknown retriever"):
        retriever.invoke(QUESTION, {"configurable": {"retrievers": ["nope"]}})
    assert shared_model.prefetched == [] and shared_model.inner.calls == []
