"""One graph run reads one revision of each store (``backends/revisions.py``: ``run_scope``,
``held_for_run``): inside a run, every later search of a store gets what the run's first
search got, in the run's threads too, even after a newer revision is published or a new BM25
index saved; outside a run, and in the next run, the newest. ``RAGGraph.stream``/``astream``
open the scope (``tests/integration/test_ingest_while_serving.py`` drives a whole graph)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
from parallel_rag.backends.bm25 import BM25Index, BM25Retriever
from parallel_rag.backends.revisions import (
    LiveRevisions,
    held_for_run,
    new_revision,
    publish,
    run_scope,
    write_lock,
)

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
