"""One graph run reads one revision of each store (``backends/shared/revisions.py``: ``run_scope``,
``held_for_run``): inside a run, every later search of a store gets what the run's first
search got, in the run's threads too, even after a newer revision is published or a new BM25
index saved; outside a run, and in the next run, the newest. A graph's entry router opens the
run (``open_run``, keyed by the run's ``RunControl``) and takes each store's revision at the
run's start, a ``hybrid`` branch's legs too; its nodes read them (``within_run``) and ``fuse``
lets them go: here a real graph over BM25 indexes written by real ingests, sync and async,
held before its hybrid branch's first search (``tests/integration/test_ingest_while_serving.py``
drives the shipped defaults through the servers)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from pathlib import Path
from typing import ClassVar

import pytest
from parallel_rag.backends.base import SearchKwargsRetriever
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.retriever import BM25Retriever
from parallel_rag.backends.hybrid.retriever import HybridRetriever
from parallel_rag.backends.shared.revisions import (
    LiveRevisions,
    close_run,
    held_for_run,
    hold_stores_for_run,
    new_revision,
    open_run,
    publish,
    run_scope,
    runs_open,
    within_run,
    write_lock,
)
from parallel_rag.graph import build_graph
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import ingest_paths
from pydantic import Field

WAIT = 60


def publish_text(directory, text) -> None:
    with write_lock(directory):
        publish(directory, new_revision(), lambda folder: (folder / "x").write_text(text), None)


def live_texts(tmp_path) -> LiveRevisions[str]:
    publish_text(tmp_path, "first")
    return LiveRevisions(lambda directory, revision: (directory / revision / "x").read_text(), str)


def in_thread(function):
    """``function()`` in another thread of the run, as LangGraph runs a branch: in a copy of
    the run's context; what it raises is raised here."""
    got: list = []
    context = contextvars.copy_context()

    def run() -> None:
        try:
            got.append(("value", context.run(function)))
        except Exception as error:  # noqa: BLE001 - raised again in the caller
            got.append(("error", error))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT)
    kind, value = got[0]
    if kind == "error":
        raise value
    return value


def test_a_run_keeps_the_revision_it_read_first(tmp_path):
    live = live_texts(tmp_path)
    with run_scope():
        assert live.get(tmp_path) == "first"
        publish_text(tmp_path, "second")
        assert live.get(tmp_path) == "first"
        assert in_thread(lambda: live.get(tmp_path)) == "first"
        with run_scope():  # a graph run inside the run (a node running a subgraph)
            assert live.get(tmp_path) == "first"
    assert live.get(tmp_path) == "second"
    with run_scope():  # the next run
        assert live.get(tmp_path) == "second"


def test_a_store_first_read_by_a_branch_is_held_for_the_whole_run(tmp_path):
    live = live_texts(tmp_path)
    with run_scope():
        assert in_thread(lambda: live.get(tmp_path)) == "first"
        publish_text(tmp_path, "second")
        assert live.get(tmp_path) == "first"
        assert in_thread(lambda: live.get(tmp_path)) == "first"


def test_runs_side_by_side_each_keep_their_own(tmp_path):
    live = live_texts(tmp_path)
    first_read, second_published = asyncio.Event(), asyncio.Event()

    async def early() -> list[str]:
        with run_scope():
            seen = [live.get(tmp_path)]
            first_read.set()
            await second_published.wait()
            return seen + [live.get(tmp_path)]

    async def late() -> list[str]:
        await first_read.wait()
        publish_text(tmp_path, "second")
        with run_scope():
            seen = [live.get(tmp_path)]
            second_published.set()
            return seen

    async def both():
        return await asyncio.gather(early(), late())

    assert asyncio.run(both()) == [["first", "first"], ["second"]]


def test_a_run_opened_by_key_holds_for_each_call_inside_it_until_closed(tmp_path):
    """What a graph's nodes do: the entry opens the run under its key, each node's call reads
    inside ``within_run(key)`` (threads included), the last closes it; another key is another
    run, and a key opened twice (a graph run inside a node of another) stays open until both
    are closed."""
    live, run, other = live_texts(tmp_path), object(), object()
    open_before = runs_open()
    open_run(run)
    with within_run(run):
        assert live.get(tmp_path) == "first"
    publish_text(tmp_path, "second")
    with within_run(run):
        assert in_thread(lambda: live.get(tmp_path)) == "first"
    open_run(other)
    with within_run(other):
        assert live.get(tmp_path) == "second"
    close_run(other)
    open_run(run)  # the inner run under the same key
    close_run(run)
    with within_run(run):
        assert live.get(tmp_path) == "first"
    close_run(run)
    with within_run(run):  # closed: reads what is live
        assert live.get(tmp_path) == "second"
    assert runs_open() == open_before


def test_a_run_scope_around_a_keyed_run_wins(tmp_path):
    live, run = live_texts(tmp_path), object()
    open_run(run)
    try:
        with run_scope():
            assert live.get(tmp_path) == "first"
            publish_text(tmp_path, "second")
            with within_run(run):
                assert live.get(tmp_path) == "first"
    finally:
        close_run(run)


def test_a_run_never_closed_is_dropped_after_its_time(tmp_path, monkeypatch):
    from parallel_rag.backends.shared import revisions as revisions

    live, failed = live_texts(tmp_path), object()
    open_run(failed)  # a run that failed before its last node: never closed
    with within_run(failed):
        assert live.get(tmp_path) == "first"
    monkeypatch.setattr(revisions, "RUN_HOLD_SECONDS", 0.0)
    open_run(later := object())  # the next run to start drops it
    close_run(later)
    assert runs_open() == 0


def test_held_for_run_outside_a_run_opens_each_time():
    opened = []
    for _ in range(2):
        held_for_run("key", lambda: opened.append(1) or len(opened))
    assert opened == [1, 1]


def test_a_bm25_retriever_keeps_its_index_for_the_run(tmp_path):
    path = tmp_path / "bm25"
    BM25Index.from_chunks([("old", "The old bridge spans the river.", {})]).save(path)
    retriever = BM25Retriever(index_path=str(path))
    with run_scope():
        assert [d.id for d in retriever.invoke("bridge")] == ["old"]
        BM25Index.from_chunks(
            [("old", "The old bridge spans the river.", {}), ("new", "A new bridge.", {})]
        ).save(path)
        assert [d.id for d in retriever.invoke("bridge")] == ["old"]
        assert len(in_thread(retriever.get_index)) == 1
    assert {d.id for d in retriever.invoke("bridge")} == {"old", "new"}


def test_a_store_the_run_could_not_open_fails_each_search_without_reading_again(tmp_path):
    opened = []
    live = LiveRevisions(
        lambda directory, revision: opened.append(revision) or "x", lambda d: "nothing here"
    )
    with run_scope():
        with pytest.raises(LookupError, match="nothing here"):
            live.get(tmp_path)
        publish_text(tmp_path, "first")  # published during the run: the next run reads it
        with pytest.raises(LookupError, match="nothing here"):
            live.get(tmp_path)
        with pytest.raises(LookupError, match="nothing here"):
            in_thread(lambda: live.get(tmp_path))
    assert opened == []
    assert live.get(tmp_path) == "x"


# -- a hybrid branch's legs --------------------------------------------------------------------

OLD_FILE, NEW_FILE = "old.md", "new.md"
FILES = {
    OLD_FILE: "# The old bridge\n\nThe old stone bridge spans the river Vire at Pontfarcy.\n",
    NEW_FILE: "# The new bridge\n\nA new steel bridge spans the river Vire below the weir.\n",
}
QUESTION = "Which bridge spans the river Vire?"


def bm25_at(index_path: str, name: str) -> dict:
    return {"name": name, "backend": "bm25", "backend_config": {"index_path": index_path}}


INDEX = "index"
INGEST = {"retrievers": [bm25_at(INDEX, "lexical"), bm25_at(INDEX, "again")]}
"""What the tests ingest with: the one BM25 index ``INDEX`` (the entries write the same one)."""


def hybrid_config(primary: dict, fallback: dict | None = None) -> dict:
    """A graph of a ``hybrid`` branch, ``kb``, beside a BM25 branch, ``direct``, over ``INDEX``
    (lexical-only extractive answers: no embedding model)."""
    legs = {"primary": primary, **({"fallback": fallback} if fallback else {})}
    return {
        "retrievers": [
            {"name": "kb", "backend": "hybrid", "backend_config": legs},
            bm25_at(INDEX, "direct"),
        ],
        "generator": {"min_similarity": None},
    }


def ingest(base_dir: Path, *names: str) -> None:
    """``names`` written as Markdown files under ``base_dir``/docs and ingested (a real ingest:
    it publishes a new save of ``INDEX``)."""
    docs = base_dir / "docs"
    docs.mkdir(exist_ok=True)
    for name in names:
        (docs / name).write_text(FILES[name], encoding="utf-8")
    ingest_paths([docs], parse_config(INGEST), base_dir, progress=False)


class Gate:
    """Holds each call that reaches it until ``opened``; ``arrived`` once one did."""

    def __init__(self) -> None:
        self.arrived, self.opened = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.arrived.set()
        assert self.opened.wait(WAIT)


def gate_before(monkeypatch, leg: str) -> Gate:
    """A gate before every hybrid's ``run_primary`` or ``run_fallback`` (``leg``): the graph
    reaches it before that leg searched, so before it opened its store."""
    gate, run_leg = Gate(), getattr(HybridRetriever, leg)
    monkeypatch.setattr(HybridRetriever, leg, lambda self, call: (gate(), run_leg(self, call))[1])
    return gate


def run_while_ingesting(graph, gate: Gate, publish_new, mode: str = "invoke") -> dict:
    """``graph`` asked QUESTION in a thread (``invoke``, or ``ainvoke`` on that thread's event
    loop); once it reaches ``gate``, ``publish_new()``, then the run goes on: its result."""
    answers: list[dict] = []
    request = {"query": QUESTION, "top_k": 5}
    if mode == "invoke":
        target = lambda: answers.append(graph.invoke(request))  # noqa: E731
    else:
        target = lambda: answers.append(asyncio.run(graph.ainvoke(request)))  # noqa: E731
    run = threading.Thread(target=target)
    run.start()
    try:
        assert gate.arrived.wait(WAIT), "the hybrid branch never searched"
        publish_new()
    finally:
        gate.opened.set()
        run.join(WAIT)
    (result,) = answers
    return result


def files_of(result: dict, branch: str) -> set[str]:
    """The files of the documents ``branch`` found."""
    return {
        Path(document["metadata"]["source"]).name
        for document in result["documents"]
        if any(source["retriever"] == branch for source in document["sources"])
    }


def assert_old_then_new(held: dict, graph, open_before: int) -> None:
    """``held`` found the old file only, in both branches; the run holds nothing once it is
    done (``open_before``: runs open before it, other tests' in this process); the next run
    finds both files."""
    assert (files_of(held, "kb"), files_of(held, "direct")) == ({OLD_FILE}, {OLD_FILE})
    assert runs_open() == open_before
    after = graph.invoke({"query": QUESTION, "top_k": 5})
    assert files_of(after, "kb") == files_of(after, "direct") == {OLD_FILE, NEW_FILE}


def kb_record(result: dict) -> tuple:
    record = next(b for b in result["branches"] if b["retriever"] == "kb")
    return record["status"], record["served_by"], record["fallback_used"]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_hybrid_primary_reads_the_index_live_when_the_run_started(tmp_path, monkeypatch, mode):
    """Held before the hybrid's primary searched, while an ingest publishes a new save: it
    answers from the save live at the run's start, as the other branch does."""
    ingest(tmp_path, OLD_FILE)
    graph = build_graph(hybrid_config(bm25_at(INDEX, "lexical")), base_dir=tmp_path)
    gate, open_before = gate_before(monkeypatch, "run_primary"), runs_open()
    held = run_while_ingesting(graph, gate, lambda: ingest(tmp_path, NEW_FILE), mode)
    assert kb_record(held) == ("ok", "lexical", False)
    assert_old_then_new(held, graph, open_before)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_hybrid_fallback_reads_the_index_live_when_the_run_started(tmp_path, monkeypatch, mode):
    """The primary's index was never written (it fails: the fallback runs after it, in a node
    of its own); the fallback is held before its first search while an ingest publishes."""
    ingest(tmp_path, OLD_FILE)
    config = hybrid_config(bm25_at("never-ingested", "unbuilt"), bm25_at(INDEX, "local"))
    graph = build_graph(config, base_dir=tmp_path)
    gate, open_before = gate_before(monkeypatch, "run_fallback"), runs_open()
    held = run_while_ingesting(graph, gate, lambda: ingest(tmp_path, NEW_FILE), mode)
    assert kb_record(held) == ("ok", "local", True)
    assert_old_then_new(held, graph, open_before)


class WarmedLeg(SearchKwargsRetriever):
    """Records its ``warm_up``; ``fails`` makes it raise there (nothing ingested yet)."""

    reads_revisions: ClassVar[bool] = True
    fails: bool = False
    warmed: list[str] = Field(default_factory=list)

    def warm_up(self) -> None:
        self.warmed.append("warm_up")
        if self.fails:
            raise LookupError("nothing ingested here yet")

    def _get_relevant_documents(self, query, *, run_manager, **kwargs):
        return []


class RemoteLeg(WarmedLeg):
    """A leg that reads no revision (a remote API): a run's start must not call it."""

    reads_revisions: ClassVar[bool] = False


def test_a_run_holds_the_hybrid_legs_that_read_revisions_and_calls_no_other():
    remote, store, missing = RemoteLeg(), WarmedLeg(), WarmedLeg(fails=True)
    with run_scope():
        hold_stores_for_run(
            [HybridRetriever(primary=remote, fallback=store), HybridRetriever(primary=missing)]
        )
    assert (remote.warmed, store.warmed, missing.warmed) == ([], ["warm_up"], ["warm_up"])


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_run_that_fails_or_is_refused_holds_nothing_after_it(fakes, mode):
    """A branch failing under ``on_failure: block`` ends the run before ``fuse``: the node that
    raised lets the run's holds go; a run refused at its entry (a bad knob) never took any."""
    from parallel_rag.graph.context import KnobError
    from parallel_rag.nodes.failure_policy import BlockedError
    from small_graphs import graph_of

    retrievers = {"bad": fakes.FailingRetriever(), "good": fakes.ListRetriever()}
    graph = graph_of(retrievers, {"on_failure": "block"})
    open_before = runs_open()

    def run(request, **extra):
        if mode == "invoke":
            return graph.invoke(request, **extra)
        return asyncio.run(graph.ainvoke(request, **extra))

    with pytest.raises(BlockedError):
        run({"query": QUESTION})
    assert runs_open() == open_before
    with pytest.raises(KnobError):
        run({"query": QUESTION}, context={"retrievers": ["nope"]})
    assert runs_open() == open_before
