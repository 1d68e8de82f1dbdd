"""A chunk's leading title line counts ``TITLE_WEIGHT`` times in BM25 (a field weight): a query
on the title's words ranks the titled chunk first; a title that does not open the text adds
nothing; an index saved before titles were weighted is rebuilt by the next ingest, not
appended to."""

from __future__ import annotations

import json

from parallel_rag.backends.base import BackendContext
from parallel_rag.backends.bm25.chunks import TITLE_WEIGHT, indexed_text
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.retriever import BM25Store
from parallel_rag.backends.bm25.settings import BM25Settings
from parallel_rag.backends.bm25.storage import MANIFEST_FILE

FILLER = [
    (
        "d0",
        "Calcium channels\nThe heart muscle contracts when calcium ions enter.",
        "Calcium channels",
    ),
    (
        "d1",
        "Heart rhythm\nCalcium channels open, calcium channels close: heart muscle.",
        "Heart rhythm",
    ),
    *[
        (f"x{i}", f"Note {i}\nUnrelated text about rivers number {i}.", f"Note {i}")
        for i in range(20)
    ],
]


def test_the_title_line_counts_title_weight_times():
    assert TITLE_WEIGHT > 1
    chunks = [(i, text, {"title": title}) for i, text, title in FILLER]
    index = BM25Index.from_chunks(chunks)
    # d1's body says "calcium channels" twice, d0 once in its title (d1 first when titles
    # count once): the title line counts more
    assert [h.chunk.id for h in index.search("calcium channels", k=2)] == ["d0", "d1"]
    assert len(index.chunk_term_ids(0)) > len(
        BM25Index.from_chunks([(i, t, {}) for i, t, _ in FILLER]).chunk_term_ids(0)
    )


def test_a_title_that_does_not_open_the_text_adds_nothing():
    chunk = BM25Index.from_chunks([("a", "Body text only", {"title": "report-final"})]).chunks[0]
    assert indexed_text(chunk) == "Body text only"
    prefix = BM25Index.from_chunks([("b", "Titled document body", {"title": "Titled"})]).chunks[0]
    assert indexed_text(prefix) == "Titled document body"  # a prefix of the first line is no title
    titled = BM25Index.from_chunks([("c", "Title\nbody", {"title": "Title"})]).chunks[0]
    assert indexed_text(titled).split("\n") == ["Title"] * TITLE_WEIGHT + ["body"]


def test_an_index_saved_with_titles_counted_otherwise_is_rebuilt(tmp_path):
    settings = BM25Settings(index_path=str(tmp_path / "bm25"))
    store = BM25Store(settings, BackendContext(tmp_path, "unused", "cpu"))
    BM25Index.from_chunks([(i, t, {"file_id": "f", "title": ti}) for i, t, ti in FILLER]).save(
        store.path
    )
    manifest = json.loads((store.path / MANIFEST_FILE).read_text())
    assert manifest["title_weight"] == TITLE_WEIGHT
    assert store.fingerprints(["f"]) is not None
    del manifest["title_weight"]  # as saved before titles were weighted
    (store.path / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert store.fingerprints(["f"]) is None  # ingest writes every file again
