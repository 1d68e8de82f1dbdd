"""How chunks become points of a Qdrant Edge collection (``qdrant_edge``): the point ids, the
passages a long chunk is split into for the model, and each chunk's sentences.

A chunk's first passage is its own point (it alone carries the content); later passages and
sentences get ids derived from the chunk id, so a write can replace them and a search can find a
chunk's other points without reading any payload. Points are made ``WRITE_BATCH`` chunks at a
time, each embedded as it is made, so a write never holds a whole collection as points.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from parallel_rag.backends.base import ChunkBatch, SentenceSource
from parallel_rag.backends.encoders.embeddings import load_embeddings, resolve_model
from qdrant_edge import Point

if TYPE_CHECKING:
    from parallel_rag.backends.qdrant_edge.settings import PassageSettings

WRITE_BATCH = 1024  # chunks whose points are made, embedded and upserted together
ID_CACHE_CHUNKS = 8192  # chunks whose sentence point ids are kept (about 1 KB each)


def point_id(chunk_id: str) -> str:
    """The shard's id for a chunk: the chunk id itself when it is a UUID, else one derived
    from it (the same chunk id always gives the same point)."""
    try:
        return str(uuid.UUID(str(chunk_id)))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, str(chunk_id)))


def passage_point_id(chunk_id: str, number: int) -> str:
    """The point of a chunk's passage ``number``: passage 0 is the chunk's own point (which
    also holds its content), later ones get ids derived from the chunk id."""
    if number == 0:
        return point_id(chunk_id)
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{chunk_id}#passage-{number}"))


def passage_uuids(chunk_id: str, numbers: range) -> list[uuid.UUID]:
    """``passage_point_id`` of each of ``numbers`` as a UUID (what a search hit's id is, so
    hits are matched without making text of their ids)."""
    first = [uuid.UUID(point_id(chunk_id))] if 0 in numbers else []
    return first + uuid5_series(f"{chunk_id}#passage-", (n for n in numbers if n > 0))


# uuid5's version (5) and variant (RFC 4122) bits, set in the hash's first 16 bytes
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET = (5 << 76) | (0x8000 << 48)


def uuid5_series(prefix: str, numbers: Iterable[int]) -> list[uuid.UUID]:
    """``uuid.uuid5(NAMESPACE_URL, f"{prefix}{n}")`` for each of ``numbers``, the shared
    prefix hashed once (about three times cheaper than ``uuid5`` per id)."""
    base = hashlib.sha1(uuid.NAMESPACE_URL.bytes + prefix.encode("utf-8"))
    series = []
    for number in numbers:
        digest = base.copy()
        digest.update(str(number).encode("ascii"))
        value = int.from_bytes(digest.digest()[:16], "big")
        series.append(uuid.UUID(int=(value & _UUID5_CLEAR) | _UUID5_SET))
    return series


class PassageSplitter:
    """Splits a text into passages the embedding model reads whole (see ``PassageSettings``)."""

    def __init__(self, tokenizer: Any, max_tokens: int, stride: int | None = None):
        self.tokenizer = tokenizer
        self.room = max_tokens - SPECIAL_TOKENS  # word pieces of text a passage holds
        self.stride = max(1, min(stride or self.room, self.room))

    def count(self, text: str) -> int:
        # verbose=False: a text longer than the model reads is what a splitter is given, and
        # transformers would warn on stderr that it is (the CLI's output is ours)
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def heading(self, text: str, title: str | None) -> tuple[str, str]:
        """(title, body): the title metadata when the text starts with it, else a first line
        short enough to lead every passage, else no title."""
        if title and text.startswith(title) and text[len(title) : len(title) + 1] in ("\n", ""):
            return title, text[len(title) :].lstrip()
        first, newline, rest = text.partition("\n")
        if newline and rest.strip() and self.count(first) <= self.room // 4:
            return first.strip(), rest.lstrip()
        return "", text

    def split(self, text: str, title: str | None = None) -> list[str]:
        """The passages of ``text``: ``[text]`` when the model reads it whole."""
        if len(text) <= self.room or self.count(text) <= self.room:
            return [text]
        head, body = self.heading(text, title)
        room = self.room - (self.count(head) if head else 0)
        if room < self.room // 2:  # a title that long would crowd out the text
            head, body, room = "", text, self.room
        encoded = self.tokenizer(
            body, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        offsets = encoded["offset_mapping"]
        words = encoded.word_ids()
        total = len(offsets)
        # windows start and end on word boundaries (never inside a word's pieces)
        bounds = [i for i in range(1, total) if words[i] != words[i - 1]] + [total]
        last = bounds[bisect.bisect_left(bounds, total - room)]  # the window ending the text
        passages: list[str] = []
        start = 0
        while True:
            at = bisect.bisect_right(bounds, start + room) - 1
            end = bounds[at] if at >= 0 and bounds[at] > start else min(start + room, total)
            piece = body[offsets[start][0] : offsets[end - 1][1]]
            passages.append(f"{head}\n{piece}" if head else piece)
            if end >= total:
                return passages
            at = bisect.bisect_right(bounds, start + min(self.stride, room)) - 1
            following = bounds[at] if at >= 0 and bounds[at] > start else end
            start = min(following, last) if last > start else following


SPECIAL_TOKENS = 2  # [CLS] and [SEP] count against the model's input length
_splitters: dict[tuple[str, int | None, int | None], PassageSplitter | None] = {}


def passage_splitter(
    embeddings: Any, model: str, passages: PassageSettings
) -> PassageSplitter | None:
    """The splitter for a model's tokenizer (a fast one, for character offsets); None when the
    model exposes none, so chunks stay whole."""
    key = (model, passages.max_tokens, passages.stride)
    if key not in _splitters:
        client = getattr(embeddings, "_client", None)
        tokenizer = getattr(client, "tokenizer", None)
        length = getattr(client, "max_seq_length", None)
        if tokenizer is None or not getattr(tokenizer, "is_fast", False):
            try:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(resolve_model(model))
            except Exception:
                tokenizer = None
        if tokenizer is None or not getattr(tokenizer, "is_fast", False):
            _splitters[key] = None
        else:
            length = length or getattr(tokenizer, "model_max_length", 512)
            max_tokens = min(passages.max_tokens or length, length)
            _splitters[key] = PassageSplitter(tokenizer, max_tokens, passages.stride)
    return _splitters[key]


def passage_points(
    batch: ChunkBatch,
    passages: PassageSettings,
    model: str,
    device: str,
    sentence_counts: Sequence[int] | None = None,
) -> list[Point]:
    """The points of a batch: one per chunk the model reads whole (its batch vector), else one
    per passage. The first passage is what the model reads of the whole chunk when passages
    are as long as the model's input, so it keeps the batch vector; the others are embedded
    here with the shared model. ``sentence_counts`` (each chunk's sentence points) go into
    every point's payload, so a search can find the sentences of a chunk it met by a passage."""
    # a text has at most as many word pieces as characters: short texts need no tokenizer
    if max(map(len, batch.texts)) <= (passages.max_tokens or 128) - SPECIAL_TOKENS:
        return chunk_points(batch, sentence_counts)
    embeddings = load_embeddings(model, device)
    splitter = passage_splitter(embeddings, model, passages)
    vectors = batch.vectors if batch.vectors is not None else []
    split = [
        splitter.split(text, (meta or {}).get("title")) if splitter else [text]
        for text, meta in zip(batch.texts, batch.metadatas, strict=True)
    ]
    reads_whole = splitter is not None and splitter.room + SPECIAL_TOKENS >= getattr(
        getattr(embeddings, "_client", None), "max_seq_length", 0
    )
    todo = [
        (i, n)
        for i, parts in enumerate(split)
        for n in range(len(parts))
        if len(parts) > 1 and (n > 0 or not reads_whole)
    ]
    embedded = {}
    for start in range(0, len(todo), WRITE_BATCH):
        part = todo[start : start + WRITE_BATCH]
        rows = embeddings.embed_documents([split[i][n] for i, n in part])
        embedded.update(zip(part, rows, strict=True))
    points = []
    for i, parts in enumerate(split):
        chunk_id = str(batch.ids[i])
        metadata = dict(batch.metadatas[i])
        for n in range(len(parts)):
            vector = embedded.get((i, n), vectors[i] if n == 0 else None)
            payload: dict[str, Any] = {
                "id": chunk_id,
                "metadata": metadata,
                "passage": n,
                "passages": len(parts),
            }
            if sentence_counts is not None:
                payload["sentences"] = sentence_counts[i]
            if n == 0:
                payload["content"] = batch.texts[i]
            points.append(Point(passage_point_id(chunk_id, n), as_vector(vector), payload))
    return points


def as_vector(values: Any) -> np.ndarray:
    """Vectors as float32 arrays for the engine: a point's vector as a list of Python floats
    was about 12 KB, eight times the array, and a write holds the points of ``WRITE_BATCH``
    chunks with their sentences (thousands) at once."""
    return np.asarray(values, dtype=np.float32)


def chunk_points(batch: ChunkBatch, sentence_counts: Sequence[int] | None = None) -> list[Point]:
    """One point per chunk, its batch vector (no passages); with ``sentence_counts``, each
    chunk's count of sentence points in its payload."""
    points = []
    for i, meta in enumerate(batch.metadatas):
        payload = {"id": str(batch.ids[i]), "content": batch.texts[i], "metadata": dict(meta)}
        if sentence_counts is not None:
            payload["sentences"] = sentence_counts[i]
        points.append(Point(point_id(batch.ids[i]), as_vector(batch.vectors[i]), payload))
    return points


def sentence_point_id(chunk_id: str, number: int) -> str:
    """The point of a chunk's sentence ``number`` in the sentence shard."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{chunk_id}#sentence-{number}"))


@functools.lru_cache(maxsize=ID_CACHE_CHUNKS)
def sentence_uuids(chunk_id: str, count: int) -> tuple[uuid.UUID, ...]:
    """``sentence_point_id`` of a chunk's ``count`` sentences as UUIDs (see ``passage_uuids``);
    kept for the chunks searches meet most (the ids never change)."""
    return tuple(uuid5_series(f"{chunk_id}#sentence-", range(count)))


def sentence_points(
    batch: ChunkBatch, sentences: Sequence[Sequence[str]], source: SentenceSource
) -> list[Point]:
    """One point per sentence of each chunk (``sentences[i]`` are chunk ``i``'s), embedded
    by ``source`` (the generator's sentences ingest hands over: stored vectors read first),
    each distinct text of the batch once; payload: the chunk id, its metadata (for filters and
    deletes) and the sentence number."""
    unique = list(dict.fromkeys(text for parts in sentences for text in parts))
    if not unique:
        return []
    embeddings = source.embeddings()
    vectors: dict[str, Any] = {}
    for start in range(0, len(unique), WRITE_BATCH):
        part = unique[start : start + WRITE_BATCH]
        vectors.update(zip(part, as_vector(embeddings.embed_documents(part)), strict=True))
    points = []
    for i, parts in enumerate(sentences):
        chunk_id = str(batch.ids[i])
        metadata = dict(batch.metadatas[i])
        for n, text in enumerate(parts):
            payload = {"id": chunk_id, "metadata": metadata, "sentence": n}
            points.append(Point(sentence_point_id(chunk_id, n), vectors[text], payload))
    return points
