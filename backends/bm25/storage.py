"""A BM25 index on disk: its files, their format, and what tells one save from the next.

On-disk layout (one directory)::

    manifest.json       format version, analyzer, k1, b, variant, sizes
    chunks.jsonl        one {"id", "content", "metadata"} object per chunk, corpus order
    vocab.json          list of terms; a term's position is its term id
    token_ids.npy       int32, every chunk's term ids concatenated (corpus order)
    token_offsets.npy   int64, N + 1 offsets into token_ids.npy
    bm25s/              the bm25s model, written by ``bm25s.BM25.save`` (absent if no terms)

Saving goes through ``atomic_files.write_directory`` (a staging sibling renamed into place),
so an interrupted save never leaves a half-written index; the manifest is written last, so a
directory without one is never taken for an index, and each save has a stamp of its own
(``index_stamp``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
from parallel_rag.backends.bm25.analysis import AnalyzerName
from parallel_rag.backends.bm25.chunks import TITLE_WEIGHT, BM25Chunk
from parallel_rag.backends.bm25.scoring import BM25_VARIANT, bm25s_model
from parallel_rag.backends.shared.atomic_files import ASIDE_MARK, restore_moved_aside

FORMAT_NAME = "parallel-rag-bm25"

FORMAT_VERSION = 1

MANIFEST_FILE = "manifest.json"

CHUNKS_FILE = "chunks.jsonl"

VOCAB_FILE = "vocab.json"

TOKEN_IDS_FILE = "token_ids.npy"

TOKEN_OFFSETS_FILE = "token_offsets.npy"

BM25S_DIR = "bm25s"


def missing_index_message(path: str | os.PathLike[str]) -> str:
    """The error text for an index directory that does not exist (or is not an index)."""
    where = Path(path)
    shown = str(where) if where.is_absolute() else f"{where} (resolved: {where.absolute()})"
    return f"No BM25 index found at {shown}. Run `parallel-rag ingest` to build it."


def write_terms(
    directory: Path,
    vocabulary: Sequence[str],
    token_ids: np.ndarray,
    offsets: np.ndarray,
    *,
    analyzer: AnalyzerName,
    k1: float,
    b: float,
    model: bm25s.BM25 | None = None,
) -> None:
    """Everything of an index but its chunks file, into ``directory``: the vocabulary, the term
    ids, the bm25s model (built from the term ids unless given) and, last, the manifest."""
    with open(directory / VOCAB_FILE, "w", encoding="utf-8") as f:
        json.dump(list(vocabulary), f, ensure_ascii=False)
    write_token_ids(directory, token_ids, offsets)
    if vocabulary:
        if model is None:
            model = bm25s_model(token_ids, offsets, {t: i for i, t in enumerate(vocabulary)}, k1, b)
        model.save(directory / BM25S_DIR, show_progress=False)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "variant": BM25_VARIANT,
        "analyzer": analyzer,
        "k1": k1,
        "b": b,
        "title_weight": TITLE_WEIGHT,
        "num_chunks": int(offsets.size - 1),
        "num_terms": len(vocabulary),
        "num_tokens": int(token_ids.size),
        "bm25s_version": bm25s.__version__,
    }
    # Written last: a directory without a manifest is never taken for an index.
    with open(directory / MANIFEST_FILE, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)


def chunk_line(chunk: BM25Chunk) -> str:
    """A chunk as its line of ``chunks.jsonl`` (newline included)."""
    record = {"id": chunk.id, "content": chunk.content, "metadata": chunk.metadata}
    try:
        return json.dumps(record, ensure_ascii=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise TypeError(f"chunk {chunk.id!r}: metadata is not JSON-serialisable ({exc})") from exc


def write_chunks(path: Path, chunks: Sequence[BM25Chunk]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(map(chunk_line, chunks))


def read_chunks(path: Path) -> tuple[BM25Chunk, ...]:
    chunks: list[BM25Chunk] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                chunks.append(BM25Chunk(record["id"], record["content"], record["metadata"]))
    return tuple(chunks)


def write_token_ids(directory: Path, token_ids: np.ndarray, offsets: np.ndarray) -> None:
    np.save(directory / TOKEN_IDS_FILE, np.asarray(token_ids, dtype=np.int32))
    np.save(directory / TOKEN_OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))


def is_replaceable(target: Path) -> bool:
    """Only an earlier index (or an empty directory) may be replaced by :meth:`save`."""
    if not target.is_dir():
        return False
    return is_index_directory(target) or not any(target.iterdir())


def is_index_directory(path: Path) -> bool:
    """A directory holding a complete index (the manifest is written last)."""
    return (path / MANIFEST_FILE).is_file()


def recover_interrupted_save(path: str | os.PathLike[str]) -> bool:
    """Put back the previous index when a save was killed between its two renames (the index
    moved aside, the new one not yet in place); True if it did. Only writers call this."""
    return restore_moved_aside(path, is_index_directory)


IndexStamp = tuple[int, int, int, int, int]
"""What identifies one save of an index: its manifest's device, inode, size, mtime and ctime."""


def index_stamp(path: str | os.PathLike[str]) -> IndexStamp | None:
    """The stamp of the index saved at ``path`` (one ``stat`` of its manifest), or None when
    there is none. Each save writes a new manifest, last, in a new directory renamed into
    place, so every save has a stamp of its own."""
    try:
        stat = os.stat(Path(path) / MANIFEST_FILE)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def save_in_progress(path: Path) -> bool:
    """A save is between its two renames: the old index moved aside, the new one not in yet."""
    return any(path.parent.glob(f".{path.name}{ASIDE_MARK}*"))
