"""The revision-store code the managed vector store and Qdrant Edge share
(``backends/shared/revisions.py``): publishing a complete revision, keeping the previous one for
readers, holding the live one open per process until ``CURRENT`` moves, and each user's own
"nothing published yet" message."""

from __future__ import annotations

import threading
import time

import pytest
from parallel_rag.backends.qdrant_edge import search as qdrant_edge_search
from parallel_rag.backends.shared.revisions import (
    CURRENT_FILE,
    LiveRevisions,
    current_revision,
    new_revision,
    publish,
    write_lock,
)
from parallel_rag.backends.vectorstore import retriever as vectorstore


def publish_text(directory, text, previous=None) -> str:
    revision = new_revision()
    with write_lock(directory):
        publish(directory, revision, lambda folder: (folder / "x").write_text(text), previous)
    return revision


def revisions_on_disk(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if p.is_dir()}


def test_publish_keeps_the_live_and_the_previous_revision_only(tmp_path):
    assert current_revision(tmp_path) is None
    first = publish_text(tmp_path, "1")
    second = publish_text(tmp_path, "2", previous=first)
    assert current_revision(tmp_path) == second
    assert revisions_on_disk(tmp_path) == {first, second}
    third = publish_text(tmp_path, "3", previous=second)
    assert revisions_on_disk(tmp_path) == {second, third}
    assert (tmp_path / CURRENT_FILE).read_text() == third
    assert (tmp_path / third / "x").read_text() == "3"
    assert first < second < third  # later revisions sort after earlier ones


def test_a_failed_fill_publishes_nothing(tmp_path):
    first = publish_text(tmp_path, "1")

    def broken(folder):
        (folder / "x").write_text("half")
        raise OSError("disk full")

    with write_lock(tmp_path), pytest.raises(OSError):
        publish(tmp_path, new_revision(), broken, first)
    assert current_revision(tmp_path) == first
    assert revisions_on_disk(tmp_path) == {first}


def test_the_write_lock_removes_what_a_killed_writer_left(tmp_path):
    stale = tmp_path / f".{new_revision()}.tmp-abc"
    stale.mkdir(parents=True)
    with write_lock(tmp_path):
        assert not stale.exists()


def test_the_live_revision_is_opened_once_until_current_moves(tmp_path):
    opened: list[str] = []

    def load(directory, revision):
        opened.append(revision)
        time.sleep(0.05)  # long enough for the other readers to ask meanwhile
        return (directory / revision / "x").read_text()

    live = LiveRevisions(load, lambda directory: f"nothing in {directory.name}")
    with pytest.raises(LookupError, match="nothing in"):
        live.get(tmp_path)
    first = publish_text(tmp_path, "1")
    got: list[str] = []
    readers = [threading.Thread(target=lambda: got.append(live.get(tmp_path))) for _ in range(4)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert got == ["1"] * 4 and opened == [first] and len(live) == 1
    second = publish_text(tmp_path, "2", previous=first)
    assert live.get(tmp_path) == "2" and opened == [first, second]
    live.clear()
    assert live.get(tmp_path) == "2" and opened == [first, second, second]


def test_each_user_keeps_its_own_message_for_a_store_not_written_yet(tmp_path):
    with pytest.raises(LookupError, match=r"vector store 'kb' does not exist .* --store kb"):
        vectorstore.open_store(tmp_path / "kb")
    with pytest.raises(LookupError, match=r"Qdrant Edge collection 'docs' does not exist"):
        qdrant_edge_search.open_revision(tmp_path / "docs")


def test_both_users_publish_through_the_shared_code(tmp_path):
    """A managed store written twice: the live revision is the second, the first kept for
    readers still loading it, and a reader holds the new one."""
    directory = tmp_path / "kb"
    columns = {"texts": ["a"], "metadatas": [{"file_id": "f"}], "vectors": [[1.0, 0.0]]}
    first = vectorstore.write_chunks(directory, ids=["1"], replace_file_ids=["f"], **columns)
    second = vectorstore.write_chunks(directory, ids=["2"], replace_file_ids=["f"], **columns)
    assert current_revision(directory) == second["revision"]
    assert revisions_on_disk(directory) == {first["revision"], second["revision"]}
    assert vectorstore.open_store(directory).ids == ["2"]
