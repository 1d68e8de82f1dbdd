"""``BM25Retriever`` picks up a newer save of its index without ``reload()``: real indexes built
and saved with ``BM25Index`` (small in-test corpora), queried while they are replaced.

Interleavings are made deterministic with hooks around the real load (events, never sleeps);
the in-process and cross-process ingest paths are in
``tests/integration/test_bm25_reload.py``."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import pytest
from parallel_rag.backends.bm25 import index as bm25_index
from parallel_rag.backends.bm25 import retriever as bm25_module
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.retriever import BM25Retriever
from parallel_rag.backends.bm25.settings import BM25Settings
from parallel_rag.backends.bm25.storage import index_stamp

WAIT = 60  # seconds a hook waits for an event before the test fails (never reached when green)

OLD = [
    ("old-bridge", "The Golden Gate Bridge spans the strait at San Francisco.", {"n": 1}),
    ("old-comet", "Halley's Comet returns to the inner solar system every 76 years.", {"n": 1}),
    ("old-moons", "Galileo discovered the four large moons of Jupiter in 1610.", {"n": 1}),
]
NEW = [
    *OLD,
    ("new-viaduct", "The Millau Viaduct crosses the Tarn valley in southern France.", {"n": 2}),
]
OTHER = [
    ("other-pulsar", "A pulsar is a rotating neutron star that emits beams.", {"n": 3}),
    ("other-unix", "Unix was developed at Bell Labs by Thompson and Ritchie.", {"n": 3}),
    ("other-enigma", "Turing helped break the Enigma cipher at Bletchley Park.", {"n": 3}),
]
VIADUCT = "Which viaduct crosses the Tarn valley?"


def save(chunks, path: Path, engine: str = "bm25s") -> Path:
    BM25Index.from_chunks(chunks, engine=engine).save(path)
    return path


def ids(docs) -> list[str]:
    return [d.id for d in docs]


@pytest.fixture
def path(tmp_path) -> Path:
    return save(OLD, tmp_path / "bm25")


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Records each ``BM25Index.load`` (the real one runs)."""
    calls: list[str] = []
    real_load = BM25Index.load.__func__

    def counting_load(cls, *args, **kwargs):
        calls.append(str(args[0]))
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(BM25Index, "load", classmethod(counting_load))
    return calls


def reload_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == bm25_module.__name__ and r.levelno == logging.WARNING
    ]


# -- picking up a new save -------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_a_new_save_is_answered_from_without_reload(tmp_path, engine):
    path = save(OLD, tmp_path / "bm25", engine)
    retriever = BM25Retriever(index_path=str(path), engine=engine, k=2)
    assert "new-viaduct" not in ids(retriever.invoke(VIADUCT))
    save(NEW, path, engine)
    assert ids(retriever.invoke(VIADUCT))[0] == "new-viaduct"
    assert len(retriever.get_index()) == len(NEW)
    save(OTHER, path, engine)  # a save that drops chunks is picked up too
    assert ids(retriever.invoke("Who broke the Enigma cipher?")) == ["other-enigma"]
    assert retriever.invoke(VIADUCT) == []


def test_an_unchanged_index_is_loaded_once_and_a_new_save_once(path, loads):
    retriever = BM25Retriever(index_path=str(path), k=2)
    retriever.batch(["comet"] * 8, config={"max_concurrency": 8})
    assert loads == [str(path)]
    save(NEW, path)
    retriever.batch([VIADUCT] * 8, config={"max_concurrency": 8})
    retriever.invoke("comet")
    assert len(loads) == 2


def test_the_stamp_is_the_manifest_of_each_save(path):
    first = index_stamp(path)
    assert first is not None and index_stamp(path) == first
    save(NEW, path)
    second = index_stamp(path)
    assert second is not None and second != first
    assert index_stamp(path.parent / "nowhere") is None


def test_auto_reload_off_keeps_the_loaded_index_until_reload(path):
    settings = BM25Settings(index_path=str(path), auto_reload=False)
    retriever = BM25Retriever.from_settings(settings, k=2)
    assert retriever.auto_reload is False
    assert "new-viaduct" not in ids(retriever.invoke(VIADUCT))
    save(NEW, path)
    assert "new-viaduct" not in ids(retriever.invoke(VIADUCT))
    retriever.reload()
    assert ids(retriever.invoke(VIADUCT))[0] == "new-viaduct"


def test_settings_default_to_auto_reload():
    assert BM25Settings().auto_reload is True
    assert BM25Retriever().auto_reload is True


def test_the_prf_index_accessor_follows_new_saves(path):
    """``get_index`` (what the PRF rewriter reads) is the reloaded index, too."""
    retriever = BM25Retriever(index_path=str(path))
    before = retriever.get_index()
    save(NEW, path)
    after = retriever.get_index()
    assert after is not before and len(after) == len(NEW)
    assert retriever.get_index() is after


# -- a new save that cannot be loaded --------------------------------------------------------


def _truncate_vocabulary(path: Path) -> None:
    (path / "vocab.json").write_text('["cut', encoding="utf-8")


def _drop_a_chunk(path: Path) -> None:
    chunks = path / "chunks.jsonl"
    chunks.write_text("".join(chunks.read_text().splitlines(True)[:-1]), encoding="utf-8")


def _garble_the_score_matrix(path: Path) -> None:
    for item in (path / "bm25s").iterdir():
        if item.suffix == ".npy":
            item.write_bytes(b"not an array")


@pytest.mark.parametrize("damage", [_truncate_vocabulary, _drop_a_chunk, _garble_the_score_matrix])
def test_a_corrupt_new_save_keeps_the_old_index_serving_with_one_warning(path, caplog, damage):
    retriever = BM25Retriever(index_path=str(path), k=2)
    assert ids(retriever.invoke("comet")) == ["old-comet"]
    save(NEW, path)
    damage(path)
    with caplog.at_level(logging.WARNING, logger=bm25_module.__name__):
        for _ in range(5):
            assert ids(retriever.invoke("comet")) == ["old-comet"]
            assert "new-viaduct" not in ids(retriever.invoke(VIADUCT))
    warnings = reload_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and "still answering" in warnings[0]
    assert len(retriever.get_index()) == len(OLD)
    save(NEW, path)  # the next good save is loaded
    assert ids(retriever.invoke(VIADUCT))[0] == "new-viaduct"


def test_a_corrupt_save_is_not_retried_on_every_query(path, loads):
    retriever = BM25Retriever(index_path=str(path), k=2)
    retriever.invoke("comet")
    save(NEW, path)
    _truncate_vocabulary(path)
    for _ in range(5):
        retriever.invoke("comet")
    assert len(loads) == 2  # the first load, one failed attempt at the corrupt save


def test_a_deleted_index_keeps_the_old_one_serving_with_one_warning(path, caplog):
    retriever = BM25Retriever(index_path=str(path), k=2)
    assert ids(retriever.invoke("comet")) == ["old-comet"]
    shutil.rmtree(path)
    with caplog.at_level(logging.WARNING, logger=bm25_module.__name__):
        for _ in range(5):
            assert ids(retriever.invoke("comet")) == ["old-comet"]
    warnings = reload_warnings(caplog)
    assert len(warnings) == 1 and "gone" in warnings[0], warnings
    save(NEW, path)  # an ingest that recreates it is picked up
    assert ids(retriever.invoke(VIADUCT))[0] == "new-viaduct"


def test_a_missing_index_still_fails_the_first_load_with_the_ingest_hint(tmp_path):
    retriever = BM25Retriever(index_path=str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match="parallel-rag ingest"):
        retriever.invoke("comet")
    save(OLD, tmp_path / "none")  # not cached as missing: the next query loads it
    assert ids(retriever.invoke("comet", k=1)) == ["old-comet"]


def test_reload_of_a_corrupt_save_raises_and_a_good_save_recovers(path):
    """``reload()`` is explicit: its load fails like a first load (no old index to keep)."""
    retriever = BM25Retriever(index_path=str(path), k=2)
    retriever.invoke("comet")
    save(NEW, path)
    _drop_a_chunk(path)
    retriever.invoke("comet")  # the automatic check keeps the old index
    retriever.reload()
    with pytest.raises(ValueError, match="inconsistent"):
        retriever.invoke("comet")
    save(NEW, path)
    assert ids(retriever.invoke(VIADUCT))[0] == "new-viaduct"


# -- concurrency -----------------------------------------------------------------------------


def test_queries_during_a_reload_wait_for_it_and_answer_from_the_new_save(path, monkeypatch):
    """While one query loads the new save, others that see it wait for that load (one load,
    not one each) and answer from the new save: context cached above the retriever under the
    new save's fingerprint is never the old index's."""
    retriever = BM25Retriever(index_path=str(path), k=2)
    assert ids(retriever.invoke("comet")) == ["old-comet"]
    loading, release = threading.Event(), threading.Event()
    real_load = BM25Index.load.__func__
    calls: list[int] = []

    def slow_load(cls, *args, **kwargs):
        calls.append(1)
        loading.set()
        assert release.wait(WAIT)
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(BM25Index, "load", classmethod(slow_load))
    save(NEW, path)
    results: list = []
    loader = threading.Thread(target=lambda: results.append(retriever.invoke(VIADUCT)))
    loader.start()
    assert loading.wait(WAIT)
    waiters = [
        threading.Thread(target=lambda: results.append(retriever.invoke(VIADUCT))) for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    try:
        for waiter in waiters:
            waiter.join(0.2)
        assert len(results) == 0  # nobody answered from the old index meanwhile
    finally:
        release.set()
        loader.join(WAIT)
        for waiter in waiters:
            waiter.join(WAIT)
    assert len(results) == 4 and all(ids(r)[0] == "new-viaduct" for r in results)
    assert len(calls) == 1  # the waiters found the new save loaded


def test_a_save_swapped_in_while_the_files_are_read_never_yields_a_mix(path, monkeypatch):
    """The chunks are read from one save, the rest from the next: the load is thrown away and
    repeated, and the retriever ends on the newest save, whole."""
    retriever = BM25Retriever(index_path=str(path), k=3)
    retriever.invoke("comet")
    save(NEW, path)
    real_read_chunks = bm25_index.read_chunks
    swapped: list[bool] = []

    def read_then_swap(chunks_path):
        chunks = real_read_chunks(chunks_path)
        if not swapped:
            swapped.append(True)
            save(OTHER, path)  # lands between reading chunks.jsonl and the other files
        return chunks

    monkeypatch.setattr(bm25_index, "read_chunks", read_then_swap)
    docs = retriever.invoke("Who broke the Enigma cipher?")
    assert swapped and ids(docs)[0] == "other-enigma"
    index = retriever.get_index()
    assert [c.id for c in index.chunks] == [c[0] for c in OTHER]
    assert index.search(VIADUCT) == []


def test_queries_while_saves_are_swapped_in_never_fail(path):
    """Threads query without pause while the index is saved over and over: every answer
    comes whole from one save, none errors, and the last save is the one answered from."""
    corpora = [OLD, NEW, OTHER]
    expected = {frozenset(c[0] for c in corpus) for corpus in corpora}
    retriever = BM25Retriever(index_path=str(path), k=10)
    retriever.invoke("comet")
    done = threading.Event()
    errors: list[BaseException] = []
    answers = [0]

    def query() -> None:
        while not done.is_set():
            try:
                index = retriever.get_index()
                assert frozenset(c.id for c in index.chunks) in expected
                for question in ("comet", VIADUCT, "Enigma cipher"):
                    retriever.invoke(question)
                answers[0] += 1
            except BaseException as error:  # noqa: BLE001 - collected and asserted below
                errors.append(error)
                return

    threads = [threading.Thread(target=query) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for round_ in range(30):
            save(corpora[round_ % 3], path)
    finally:
        done.set()
        for thread in threads:
            thread.join(WAIT)
    assert not errors, errors
    assert answers[0] > 0
    assert [c.id for c in retriever.get_index().chunks] == [c[0] for c in corpora[29 % 3]]
