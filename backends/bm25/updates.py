"""Ingest's writes to a saved BM25 index, a batch at a time, without loading the index.

Ingest writes a large corpus a batch of files at a time, and before each batch asks every
store what it holds of those files. Loading the saved index for either (every chunk's text and
metadata as Python objects, the bm25s model) and tokenising the whole corpus again to rebuild
it made each batch cost memory and time in proportion to the index: at 170k chunks a batch
held 0.8 GB and spent 12 s of CPU on BM25 alone.

Here the saved files are read as streams and arrays instead:

- ``stored_fingerprints`` reads ``chunks.jsonl`` a line at a time, keeping only the
  fingerprints of the files asked about;
- ``replace_files`` writes the next save in one pass over the old one: the kept chunks' lines
  are copied as they are, the new chunks appended, the kept chunks' term ids taken from
  ``token_ids.npy`` (never tokenised again) and only the new chunks tokenised; terms that only
  the replaced chunks used are dropped. The result is the index ``BM25Index.from_chunks`` would
  build over the kept chunks then the new ones, scored and ranked identically (term ids may be
  numbered differently), saved atomically like any other save.

What stays in memory is the term-id arrays and the score matrix being built: a few bytes per
token, where loading the index held every chunk's text and metadata as objects too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from parallel_rag.backends.base import Fingerprint
from parallel_rag.backends.bm25.analysis import get_analyzer
from parallel_rag.backends.bm25.chunks import normalise_chunks, tokenise
from parallel_rag.backends.bm25.storage import (
    CHUNKS_FILE,
    MANIFEST_FILE,
    TOKEN_IDS_FILE,
    TOKEN_OFFSETS_FILE,
    VOCAB_FILE,
    chunk_line,
    write_terms,
)
from parallel_rag.backends.shared.atomic_files import write_directory


def stored_manifest(path: Path) -> dict[str, Any] | None:
    """The saved index's manifest, or None when there is no index at ``path``."""
    try:
        return json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def stored_fingerprints(path: Path, file_ids: Iterable[str]) -> set[Fingerprint]:
    """(chunk id, file id, ``chunk_hash``) of each chunk the saved index holds of ``file_ids``,
    read a line of ``chunks.jsonl`` at a time."""
    wanted = set(file_ids)
    found: set[Fingerprint] = set()
    with open(path / CHUNKS_FILE, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            metadata = record.get("metadata") or {}
            if metadata.get("file_id") in wanted:
                found.add((record["id"], metadata["file_id"], metadata.get("chunk_hash")))
    return found


def replace_files(
    path: Path,
    file_ids: Iterable[str],
    chunks: Iterable[tuple[str, str, Mapping[str, Any]]],
    *,
    k1: float,
    b: float,
) -> None:
    """Save at ``path`` the saved index with every chunk of ``file_ids`` (their ``file_id``
    metadata) removed and ``chunks`` appended, scored with ``k1`` and ``b``; the stored
    analyzer tokenises the new chunks. A chunk id both kept and written is refused
    (``ValueError``) and the saved index is left as it was."""
    manifest = stored_manifest(path)
    if manifest is None:
        raise FileNotFoundError(f"no BM25 index at {path}")
    replaced = set(file_ids)
    new = normalise_chunks(chunks)
    new_ids = {chunk.id for chunk in new}
    vocabulary: list[str] = json.loads((path / VOCAB_FILE).read_text(encoding="utf-8"))
    token_ids = np.load(path / TOKEN_IDS_FILE, allow_pickle=False)
    offsets = np.load(path / TOKEN_OFFSETS_FILE, allow_pickle=False)

    def fill(staging: Path) -> None:
        keep = copy_kept_lines(path / CHUNKS_FILE, staging / CHUNKS_FILE, replaced, new_ids)
        with open(staging / CHUNKS_FILE, "a", encoding="utf-8") as out:
            out.writelines(map(chunk_line, new))
        if keep.size != offsets.size - 1:
            raise ValueError(f"{path}: BM25 index files are inconsistent; re-run ingest")
        lengths = np.diff(offsets)
        kept_tokens = token_ids[np.repeat(keep, lengths)]
        term_ids = {term: i for i, term in enumerate(vocabulary)}
        analyze = get_analyzer(manifest["analyzer"]).analyze
        new_tokens, new_offsets = tokenise(new, analyze, term_ids)
        tokens = np.concatenate([kept_tokens, new_tokens])
        merged_offsets = np.concatenate(
            [[0], np.cumsum(lengths[keep]), kept_tokens.size + new_offsets[1:]]
        ).astype(np.int64)
        del kept_tokens, new_tokens
        terms = list(term_ids)
        used = np.bincount(tokens, minlength=len(terms)) > 0
        renumber = np.cumsum(used, dtype=np.int64).astype(np.int32) - 1
        write_terms(
            staging,
            [term for term, is_used in zip(terms, used.tolist(), strict=True) if is_used],
            renumber[tokens],
            merged_offsets,
            analyzer=manifest["analyzer"],
            k1=k1,
            b=b,
        )

    write_directory(path, fill)


def copy_kept_lines(
    source: Path, target: Path, replaced: set[str], written: set[str]
) -> np.ndarray:
    """Copy the lines of the chunks not in a ``replaced`` file from ``source`` to ``target``;
    which chunks were kept, in order. A kept chunk whose id is ``written`` again is refused."""
    keep: list[bool] = []
    with open(source, encoding="utf-8") as lines, open(target, "w", encoding="utf-8") as out:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            kept = (record.get("metadata") or {}).get("file_id") not in replaced
            if kept and record["id"] in written:
                raise ValueError(f"duplicate chunk id {record['id']!r}: kept and written again")
            if kept:
                out.write(line if line.endswith("\n") else line + "\n")
            keep.append(kept)
    return np.array(keep, dtype=bool)
