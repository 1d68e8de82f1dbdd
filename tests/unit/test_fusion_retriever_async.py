"""The graph's async path and ``ParallelFusionRetriever`` over it: a branch awaited on the event
loop keeps its timeout and failure policy, ``ainvoke``/``astream`` give what ``invoke`` gives,
and the retriever's ``invoke`` (run on a shared event loop) and native ``ainvoke`` keep the
caller's callbacks, ``configurable`` knobs and context — offline, on in-test retrievers."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.retrieve import RetrievalBranch, RetrieveNode, RetrieveTask
from small_graphs import compiled_graphs, graph_of, two_lists

QUESTION = "What is the capital of France?"
CALLER = contextvars.ContextVar("caller", default=None)


# ---------------------------------------------------------------- a branch on the event loop


def slow_node(fakes, policy="warn"):
    slow = fakes.BlockingRetriever(docs=[fakes.doc("s", "slow text", 1.0)], max_wait=2.0)
    branch = RetrievalBranch(
        name="slow", index=0, retriever=slow, kind="lexical", on_failure=policy, timeout_seconds=0.2
    )
    task = RetrieveTask(
        view={"index": 0, "text": "question", "kind": "original"},
        retriever="slow",
        query="question",
        top_k=5,
        filters={},
    )
    return RetrieveNode({"slow": branch}, rerank=False), task, slow


async def test_an_awaited_branch_times_out_while_the_backend_is_still_busy(fakes):
    node, task, slow = slow_node(fakes)
    try:
        update = await node.ainvoke(task, {})
        assert not slow.finished.is_set()  # the loop stopped waiting; the lookup still runs
    finally:
        slow.release.set()
    (result,) = update["branch_results"]
    assert result["status"] == "failed" and result["hits"] == []
    assert result["error"] == "timed out after 0.2s"
    assert "timed out" in result["warning"]


async def test_an_awaited_branch_under_block_raises_on_timeout(fakes):
    node, task, slow = slow_node(fakes, policy="block")
    try:
        with pytest.raises(BlockedError, match="timed out"):
            await node.ainvoke(task, {})
    finally:
        slow.release.set()


async def test_an_awaited_branch_within_its_timeout_is_the_sync_result(fakes):
    node, task, slow = slow_node(fakes)
    slow.release.set()
    (awaited,) = (await node.ainvoke(task, {}))["branch_results"]
    (synced,) = node.invoke(task, {})["branch_results"]
    assert awaited["status"] == synced["status"] == "ok"
    assert awaited["hits"] == synced["hits"] and [h["id"] for h in awaited["hits"]] == ["s"]


async def test_a_failing_branch_is_recorded_the_same_on_both_paths(fakes):
    retrievers = {**two_lists(fakes), "bad": fakes.FailingRetriever()}
    graph = graph_of(retrievers)
    synced, awaited = graph.invoke({"query": QUESTION}), await graph.ainvoke({"query": QUESTION})
    assert [d["id"] for d in awaited["documents"]] == [d["id"] for d in synced["documents"]]
    strip = [{k: v for k, v in b.items() if k != "latency_ms"} for b in synced["branches"]]
    assert [{k: v for k, v in b.items() if k != "latency_ms"} for b in awaited["branches"]] == strip
    assert awaited["warnings"] == synced["warnings"] and len(awaited["warnings"]) == 1


async def test_astream_reports_each_branch_on_the_custom_stream(fakes):
    graph = graph_of(two_lists(fakes))
    events = [
        chunk
        async for chunk in graph.astream({"query": QUESTION}, stream_mode="custom")
        if chunk.get("event") == "branch_finished"
    ]
    assert sorted(e["retriever"] for e in events) == ["a", "b"]
    assert {e["status"] for e in events} == {"ok"}


async def test_bad_input_is_refused_on_the_async_path_too(fakes):
    graph = graph_of(two_lists(fakes))
    with pytest.raises(ValueError, match="query"):
        await graph.ainvoke({"query": ""})


# ---------------------------------------------------------------- ParallelFusionRetriever


class Recorder(BaseCallbackHandler):
    """Retriever and chain runs seen by a caller's handler, with their parents."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, UUID, UUID | None]] = []
        self.lock = threading.Lock()

    def _add(self, kind: str, name: str | None, run_id: UUID, parent: UUID | None) -> None:
        with self.lock:
            self.events.append((kind, name, run_id, parent))

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, **kw):
        self._add("retriever_start", kw.get("name"), run_id, parent_run_id)

    def on_retriever_end(self, documents, *, run_id, parent_run_id=None, **kw):
        self._add("retriever_end", None, run_id, parent_run_id)

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kw):
        self._add("chain_start", kw.get("name"), run_id, parent_run_id)


def _named(recorder: Recorder, kind: str, name: str) -> list[tuple]:
    return [e for e in recorder.events if e[0] == kind and e[1] == name]


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
async def test_callbacks_see_the_retriever_run_and_the_graph_under_it(fakes, how):
    retriever = ParallelFusionRetriever(graph=compiled_graphs(two_lists(fakes)), top_k=2)
    recorder = Recorder()
    config = {"callbacks": [recorder]}
    if how == "invoke":
        docs = retriever.invoke(QUESTION, config)
    else:
        docs = await retriever.ainvoke(QUESTION, config)
    assert [d.id for d in docs] == ["paris", "berlin"]
    (start,) = _named(recorder, "retriever_start", "ParallelFusionRetriever")
    assert any(e[0] == "retriever_end" and e[2] == start[2] for e in recorder.events)
    # the retrieval graph (never the answer graph) runs as a child of the retriever run
    (graph_run,) = _named(recorder, "chain_start", "parallel-rag-retrieval")
    assert graph_run[3] == start[2]
    assert not _named(recorder, "chain_start", "parallel-rag")
    assert not _named(recorder, "chain_start", "generate")
    # the branches' own retrievers report under the graph's run tree
    assert len([e for e in recorder.events if e[0] == "retriever_start"]) == 3


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
async def test_configurable_knobs_and_call_arguments_reach_the_run(fakes, how):
    retriever = ParallelFusionRetriever(graph=compiled_graphs(two_lists(fakes)), top_k=5)
    only_b = retriever.with_config(configurable={"retrievers": ["b"]})
    if how == "invoke":
        docs = only_b.invoke(QUESTION)
        cut = retriever.invoke(QUESTION, top_k=1)
    else:
        docs = await only_b.ainvoke(QUESTION)
        cut = await retriever.ainvoke(QUESTION, top_k=1)
    assert [d.id for d in docs] == ["berlin", "paris"]
    assert {s["retriever"] for d in docs for s in d.metadata["sources"]} == {"b"}
    assert [d.id for d in cut] == ["paris"]


async def test_invoke_and_ainvoke_give_the_graph_s_fused_list(fakes):
    graph = graph_of(two_lists(fakes))
    retriever = ParallelFusionRetriever(graph=graph, top_k=3)
    expected = [d["id"] for d in graph.invoke({"query": QUESTION, "top_k": 3})["documents"]]
    assert [d.id for d in retriever.invoke(QUESTION)] == expected
    assert [d.id for d in await retriever.ainvoke(QUESTION)] == expected
    # a sync call from inside a running event loop (blocking it) works too
    assert [d.id for d in retriever.invoke(QUESTION)] == expected


class ContextReader(BaseRetriever):
    """Records the caller's context variable as a branch sees it."""

    seen: list = []

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        self.seen.append(CALLER.get())
        return [Document(id="c", page_content="context")]


def test_the_caller_s_context_reaches_the_branches_under_invoke(fakes):
    reader = ContextReader(seen=[])
    retriever = ParallelFusionRetriever.from_retrievers(
        {"reader": reader, "other": two_lists(fakes)["a"]}
    )

    def call() -> list:
        CALLER.set("request-7")
        return retriever.invoke(QUESTION)

    docs = contextvars.copy_context().run(call)
    assert "c" in [d.id for d in docs] and reader.seen == ["request-7"]


def test_a_blocked_run_raises_to_the_sync_caller(fakes):
    graph = graph_of({**two_lists(fakes), "bad": fakes.FailingRetriever()}, {"on_failure": "block"})
    with pytest.raises(BlockedError, match="retriever 'bad'"):
        ParallelFusionRetriever(graph=graph).invoke(QUESTION)


class NestedCall(BaseCallbackHandler):
    """A handler run inline by the async callback manager (on the event loop driving the
    graph) that calls a retriever synchronously when ``fuse`` starts."""

    run_inline = True

    def __init__(self, inner: ParallelFusionRetriever) -> None:
        self.inner = inner
        self.got: list[str] | None = None
        self.on_a_running_loop = False

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kw):
        if kw.get("name") == "fuse" and self.got is None:
            self.on_a_running_loop = asyncio.get_running_loop().is_running()
            self.got = [d.id for d in self.inner.invoke(QUESTION)]


@pytest.mark.parametrize("same_retriever", [False, True])
def test_invoke_on_the_event_loop_that_runs_the_graph_does_not_wait_on_itself(
    fakes, same_retriever
):
    outer = ParallelFusionRetriever(graph=compiled_graphs(two_lists(fakes)), top_k=2)
    inner = (
        outer
        if same_retriever
        else ParallelFusionRetriever(graph=compiled_graphs(two_lists(fakes)))
    )
    nested = NestedCall(inner)
    assert [d.id for d in outer.invoke(QUESTION, {"callbacks": [nested]})] == ["paris", "berlin"]
    assert nested.on_a_running_loop
    assert nested.got[:2] == ["paris", "berlin"]
    assert [d.id for d in outer.invoke(QUESTION)] == ["paris", "berlin"]  # and again


def test_invoke_from_many_threads_at_once(fakes):
    retriever = ParallelFusionRetriever(graph=compiled_graphs(two_lists(fakes)), top_k=2)
    results: list[list[str]] = []

    def call() -> None:
        for _ in range(3):
            results.append([d.id for d in retriever.invoke(QUESTION)])

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [["paris", "berlin"]] * 12


def test_invoke_from_a_sync_step_of_an_async_caller(fakes):
    # a sync LCEL step called on a running event loop's thread (blocking it) works, and gives
    # what the plain call gives
    retriever = ParallelFusionRetriever(graph=compiled_graphs(two_lists(fakes)), top_k=2)
    chain = RunnableLambda(lambda q: [d.id for d in retriever.invoke(q)])

    async def from_a_loop() -> Any:
        return chain.invoke(QUESTION)

    assert asyncio.run(from_a_loop()) == ["paris", "berlin"] == chain.invoke(QUESTION)
