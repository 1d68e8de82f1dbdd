"""Ingest streams: chunks are spooled to disk after conversion and written a batch of whole
files at a time, with the same result in the stores as one batch."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from document_files import two_bm25_config
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.studio.ingestion import pipeline
from parallel_rag.studio.ingestion.chunk import Chunk, load_chunks
from parallel_rag.studio.ingestion.spool import ChunkSpool, file_batches

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
FILES = sorted(CORPUS.glob("*.md"))[:6]


def chunk(file_id: str, number: int) -> Chunk:
    return Chunk(f"{file_id}-{number}", f"text {number}", {"file_id": file_id, "n": number})


def test_batches_close_at_a_file_boundary_or_inside_a_file_larger_than_a_batch():
    chunks = [chunk("a", 0), chunk("a", 1), chunk("a", 2), chunk("b", 0), chunk("c", 0)]
    chunks += [chunk("c", 1)]
    batches = [[c.id for c in batch] for batch in file_batches(chunks, 2)]
    assert batches == [["a-0", "a-1"], ["a-2", "b-0"], ["c-0", "c-1"]]
    assert [len(b) for b in file_batches(chunks, 100)] == [6]
    assert [[c.id for c in b] for b in file_batches(chunks, 3)] == [
        ["a-0", "a-1", "a-2"],
        ["b-0", "c-0", "c-1"],
    ]
    big = [chunk("small", 0)] + [chunk("big", n) for n in range(10)]
    assert [len(b) for b in file_batches(big, 4)] == [5, 4, 2]  # never past twice the size


def test_the_spool_gives_back_every_chunk_as_written_and_leaves_no_file(tmp_path, monkeypatch):
    """The spool's file has no name from the start: even a killed ingest leaves nothing."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    chunks = [chunk("a", 0), Chunk("x", "ünïcode\nlines", {"file_id": "b", "page": 3})]
    with ChunkSpool() as spool:
        spool.extend(chunks[:1])
        assert list(spool) == chunks[:1]
        spool.extend(chunks[1:])  # appends after a read
        assert spool.count == 2 and list(spool) == chunks and list(spool) == chunks
        assert list(tmp_path.iterdir()) == []


def test_many_small_batches_write_what_one_batch_writes(tmp_path, monkeypatch):
    writes = []
    real_write_batch = pipeline.write_batch

    def counting(chunks, *args):
        writes.append({c.metadata["file_id"] for c in chunks})
        return real_write_batch(chunks, *args)

    monkeypatch.setattr(pipeline, "write_batch", counting)
    config, base_dir = two_bm25_config(tmp_path / "small")
    report = pipeline.ingest_paths(FILES, config, base_dir, progress=False, batch_chunks=2)
    assert len(writes) > 2  # several batches
    config, one_dir = two_bm25_config(tmp_path / "one")
    pipeline.ingest_paths(FILES, config, one_dir, progress=False)
    expected = {c.id: c.content for path in FILES for c in load_chunks(path)}
    for index in ("idx/a", "idx/b"):
        small = {c.id: c.content for c in BM25Index.load(base_dir / index).chunks}
        assert small == expected
        assert sorted(small) == sorted(c.id for c in BM25Index.load(one_dir / index).chunks)
    assert report.chunks == len(expected) and report.unchanged == []
    again = pipeline.ingest_paths(FILES, config, base_dir, progress=False, batch_chunks=2)
    assert again.unchanged == again.indexes


def write_records(path: Path, texts: list[str]) -> Path:
    lines = [json.dumps({"id": f"r{n}", "text": text}) for n, text in enumerate(texts)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def indexed(base_dir: Path) -> list[dict[str, str]]:
    return [
        {c.id: c.content for c in BM25Index.load(base_dir / index).chunks}
        for index in ("idx/a", "idx/b")
    ]


WORDS = "bridge tower river steel cell gene protein climate engine railway".split()
RECORDS = [
    f"record {n}: {WORDS[n % 10]} {WORDS[(n * 3) % 10]} {WORDS[(n * 7) % 10]}" for n in range(30)
]


def test_a_file_larger_than_a_batch_is_written_in_parts_as_one_file(tmp_path, monkeypatch):
    # one big JSON-lines file (30 records) in batches of 4: parts of it in 8 batches, the
    # stores end with the file's chunks exactly as one batch writes them
    big = write_records(tmp_path / "big.jsonl", RECORDS)
    config, base_dir = two_bm25_config(tmp_path / "parts")
    sizes = []
    real_write_batch = pipeline.write_batch
    monkeypatch.setattr(
        pipeline,
        "write_batch",
        lambda chunks, *a: sizes.append(len(chunks)) or real_write_batch(chunks, *a),
    )
    report = pipeline.ingest_paths([big], config, base_dir, progress=False, batch_chunks=4)
    assert max(sizes) <= 4 and len(sizes) == 8
    expected = {c.id: c.content for c in load_chunks(big)}
    assert report.chunks == len(expected) == 30
    assert indexed(base_dir) == [expected, expected]
    again = pipeline.ingest_paths([big], config, base_dir, progress=False, batch_chunks=4)
    assert again.unchanged == again.indexes  # compared as a whole: nothing written

    # the file changed: fewer records, one edited; every part of it replaced, nothing stale
    changed = RECORDS[:17]
    changed[9] = "record 9 rewritten: quokka"
    write_records(big, changed)
    pipeline.ingest_paths([big], config, base_dir, progress=False, batch_chunks=4)
    expected = {c.id: c.content for c in load_chunks(big)}
    assert indexed(base_dir) == [expected, expected]
    assert any("quokka" in text for text in expected.values())


def test_an_ingest_killed_inside_a_big_file_is_completed_by_the_next(tmp_path, monkeypatch):
    big = write_records(tmp_path / "big.jsonl", RECORDS)
    other = write_records(tmp_path / "other.jsonl", RECORDS[:3])
    config, base_dir = two_bm25_config(tmp_path / "killed")
    calls = []
    real_write_batch = pipeline.write_batch

    def killed_on_the_fourth(chunks, *args):
        calls.append(len(chunks))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_write_batch(chunks, *args)

    monkeypatch.setattr(pipeline, "write_batch", killed_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest_paths([big, other], config, base_dir, progress=False, batch_chunks=4)
    partial = indexed(base_dir)[0]
    assert 0 < len(partial) < 30  # three parts of the big file written
    monkeypatch.setattr(pipeline, "write_batch", real_write_batch)
    pipeline.ingest_paths([big, other], config, base_dir, progress=False, batch_chunks=4)
    expected = {c.id: c.content for path in (big, other) for c in load_chunks(path)}
    assert indexed(base_dir) == [expected, expected]
