"""What a BM25 index holds of a chunk: the chunk (``BM25Chunk``), a search hit
(``BM25Hit``), the text its terms come from (``indexed_text``: the title line counted
``TITLE_WEIGHT`` times) and its term ids (``tokenise``: one compact array for the corpus).
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np


class BM25Chunk(NamedTuple):
    """One indexed chunk: stable id, text, flat JSON-serialisable metadata."""

    id: str
    content: str
    metadata: dict[str, Any]


class BM25Hit(NamedTuple):
    """A search hit: corpus position, the chunk, its BM25 score (> 0)."""

    position: int
    chunk: BM25Chunk
    score: float


def normalise_chunks(chunks: Iterable[Any]) -> tuple[BM25Chunk, ...]:
    result: list[BM25Chunk] = []
    seen: set[str] = set()
    for position, chunk in enumerate(chunks):
        try:
            doc_id, content, metadata = chunk
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"chunk #{position}: expected an (id, content, metadata) triple, got {chunk!r}"
            ) from exc
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"chunk #{position}: id must be a non-empty string, got {doc_id!r}")
        if doc_id in seen:
            raise ValueError(f"chunk #{position}: duplicate chunk id {doc_id!r}")
        if not isinstance(content, str):
            raise TypeError(f"chunk {doc_id!r}: content must be a string")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, Mapping):
            raise TypeError(f"chunk {doc_id!r}: metadata must be a mapping")
        seen.add(doc_id)
        result.append(BM25Chunk(doc_id, content, dict(metadata)))
    return tuple(result)


TITLE_WEIGHT = 3
"""How many times a chunk's title counts: a chunk whose text opens with its ``title`` metadata
on a line of its own (a record of a JSONL/CSV file, a BEIR document) has the title's terms
indexed this many times, a field weight as BM25F gives one. Chosen on SciFact train by BM25
alone: nDCG@10 0.6970 / 0.7031 / 0.7059 / 0.7062 / 0.7050 at weights 1-5, so 3, where it stops
rising (bench/FUSION-FIT-RESULTS.md, "Titles")."""


def indexed_text(chunk: BM25Chunk) -> str:
    """The text whose terms index ``chunk``: its content, with its leading title line counted
    ``TITLE_WEIGHT`` times (a title that does not open the content adds nothing: a file's name
    is not its text)."""
    title = chunk.metadata.get("title")
    content = chunk.content
    if (
        TITLE_WEIGHT > 1
        and isinstance(title, str)
        and title.strip()
        and content.startswith(title)
        and content[len(title) : len(title) + 1] in ("\n", "")
    ):
        return "\n".join([title] * (TITLE_WEIGHT - 1) + [content])
    return content


def tokenise(
    chunks: Sequence[BM25Chunk], analyze: Any, term_ids: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' term ids as one array and per-chunk offsets into it; a term not yet in
    ``term_ids`` gets the next id there. One chunk at a time into a compact C-int buffer: no
    per-token object is kept."""
    known = term_ids.__getitem__
    flat = array.array("i")
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    for i, chunk in enumerate(chunks, start=1):
        terms = analyze(indexed_text(chunk))
        try:
            flat.extend(map(known, terms))
        except KeyError:  # a new term: the ids appended before it stay, the rest follow
            for term in terms[len(flat) - int(offsets[i - 1]) :]:
                flat.append(term_ids.setdefault(term, len(term_ids)))
        offsets[i] = len(flat)
    token_ids = np.frombuffer(flat, dtype=np.intc) if flat else np.empty(0, np.intc)
    return token_ids.astype(np.int32, copy=False), offsets
