"""Ingest streams: chunks are spooled to disk after conversion and written a batch of whole
files at a time, with the same result in the stores as one batch."""

from __future__ import annotations

from pathlib import Path

from document_files import two_bm25_config
from parallel_rag.backends.bm25 import BM25Index
from parallel_rag.studio import ingestion
from parallel_rag.studio.chunk_spool import ChunkSpool, file_batches
from parallel_rag.studio.document_loading import Chunk, load_chunks

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
FILES = sorted(CORPUS.glob("*.md"))[:6]


def chunk(file_id: str, number: int) -> Chunk:
    return Chunk(f"{file_id}-{number}", f"text {number}", {"file_id": file_id, "n": number})


def test_batches_hold_whole_files_and_close_at_the_first_boundary_past_the_limit():
    chunks = [chunk("a", 0), chunk("a", 1), chunk("a", 2), chunk("b", 0), chunk("c", 0)]
    chunks += [chunk("c", 1)]
    batches = [[c.id for c in batch] for batch in file_batches(chunks, 2)]
    assert batches == [["a-0", "a-1", "a-2"], ["b-0", "c-0", "c-1"]]
    assert [len(b) for b in file_batches(chunks, 100)] == [6]


def test_the_spool_gives_back_every_chunk_as_written_and_is_deleted_on_close():
    chunks = [chunk("a", 0), Chunk("x", "ünïcode\nlines", {"file_id": "b", "page": 3})]
    with ChunkSpool() as spool:
        spool.extend(chunks)
        assert spool.count == 2 and list(spool) == chunks
        path = spool.path
    assert not path.exists()


def test_many_small_batches_write_what_one_batch_writes(tmp_path, monkeypatch):
    writes = []
    real_write_batch = ingestion.write_batch

    def counting(chunks, *args):
        writes.append({c.metadata["file_id"] for c in chunks})
        return real_write_batch(chunks, *args)

    monkeypatch.setattr(ingestion, "write_batch", counting)
    config, base_dir = two_bm25_config(tmp_path / "small")
    report = ingestion.ingest_paths(FILES, config, base_dir, progress=False, batch_chunks=2)
    assert len(writes) > 2  # several batches, no file split across two
    assert sum(len(files) for files in writes) == len(FILES)
    config, one_dir = two_bm25_config(tmp_path / "one")
    ingestion.ingest_paths(FILES, config, one_dir, progress=False)
    expected = {c.id: c.content for path in FILES for c in load_chunks(path)}
    for index in ("idx/a", "idx/b"):
        small = {c.id: c.content for c in BM25Index.load(base_dir / index).chunks}
        assert small == expected
        assert sorted(small) == sorted(c.id for c in BM25Index.load(one_dir / index).chunks)
    assert report.chunks == len(expected) and report.unchanged == []
    again = ingestion.ingest_paths(FILES, config, base_dir, progress=False, batch_chunks=2)
    assert again.unchanged == again.indexes
