"""``qdrant_edge``: Qdrant's own engine in-process (``qdrant-edge-py``): an HNSW index with
payload filters, on disk, no server. Kind: **dense**. ``similarity_threshold`` becomes the
search's ``score_threshold`` (cosine similarity).

The embedded dense store for corpora past a few thousand chunks: at 100k clustered 384-d
vectors a search takes about a millisecond at recall@10 1.0 against exact search (see
``bench/ANN-RESULTS.md``), where Qdrant local mode scans every vector. Small collections (below
``full_scan_threshold_kb``) are searched exactly. An indexed segment keeps an 8-bit copy of its
vectors in memory (``quantization``) that the index walks; the hits are rescored with the stored
vectors, so every score returned is the stored vectors' own. For several processes writing at
once, or a corpus that outgrows one machine, move to a Qdrant server (the ``qdrant`` backend with
``url:``).

Layout under ``path`` (default ``.parallel-rag/qdrant_edge``)::

    COLLECTION/CURRENT               the live revision's directory name (replaced atomically)
    COLLECTION/<revision>/           one Qdrant Edge shard (segments, WAL, its config)
    COLLECTION/<revision>/parallel_rag.json   embedding identity, dimension, chunk count
    COLLECTION/<revision>/sentences/          the chunks' sentence vectors, a second shard
                                              (with ``passages.sentence_weight`` above 0)

Readers never open the shard being written: a write copies the live revision into a staging
directory, applies the deletes and upserts there, builds the index, flushes, and publishes it
through ``atomic_files`` (rename, then ``CURRENT``). Readers, in this process or others, keep
answering from the revision they hold until they see the new ``CURRENT``; a writer killed
halfway leaves only a staging directory, removed by the next write. Since a revision is
complete before anyone reads it, shards are written without a WAL (which would also lock a
shard to one process).
Writers take a file lock. Points carry ``{"id", "content", "metadata"}``; the point id is the
chunk id when it is a UUID, else a UUID derived from it, and results carry the chunk id.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.atomic_files import write_file
from parallel_rag.backends.base import (
    BackendSpec,
    ChunkBatch,
    DenseStoreRetriever,
    Fingerprint,
    MetadataFilter,
    SettingsStore,
    resolve_path,
    scored_document,
    settings_factory,
)
from parallel_rag.backends.embeddings import (
    BUNDLED,
    embedding_identity,
    load_embeddings,
    resolve_model,
)
from parallel_rag.backends.mapped_files import populate_mapped
from parallel_rag.backends.revisions import (
    LiveRevisions,
    current_file_of,
    current_revision,
    new_revision,
    publish,
    write_lock,
)
from parallel_rag.backends.sentence_vectors import load_stored_sentence_embeddings
from parallel_rag.backends.text_analysis import split_sentences
from pydantic import BaseModel, ConfigDict, Field
from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    HnswIndexConfig,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Memory,
    PayloadSelector,
    Point,
    QuantizationSearchParams,
    Query,
    QueryRequest,
    RangeFloat,
    ScalarQuantizationConfig,
    ScalarType,
    ScrollRequest,
    SearchParams,
    UpdateOperation,
    VectorStorageDatatype,
)

DEFAULT_PATH = ".parallel-rag/qdrant_edge"
MANIFEST_FILE = "parallel_rag.json"
WRITE_BATCH = 1024
PASSAGE_OVERFETCH = 4  # points asked per chunk wanted when chunks have passages
SENTENCES_DIR = "sentences"  # the revision's sentence shard, beside the passage shard's files
DEFAULT_SENTENCE_WEIGHT = 0.5
DEFAULT_SENTENCE_SEGMENT_MB = 128
"""With half-precision vectors, 128 MB holds the 175k 384-dimension vectors that 256 MB held at
float32: the same segments to search, half the pages a write maps (bench/INGEST-RESULTS.md)."""
DEFAULT_SEGMENT_MB = 64
"""Half the sentence shard's: a passage point carries its chunk's text and metadata (about 1 KB,
more than its vector), so at the same vector count its segment is the largest thing a write
rebuilds: past 150k chunks its merges set a 100k-document ingest's peak (2.1-2.2 GB at 128 MB,
bench/INGEST-RESULTS.md)."""
ID_CACHE_CHUNKS = 8192  # chunks whose sentence point ids are kept (about 1 KB each)
# What a search reads of each hit's payload. The shard keeps payloads on disk and reading a
# whole one (content, metadata) costs far more than the vector search itself, so a search reads
# only what ranking needs and the chunks that make the top k are read whole once, at the end.
RANKING_PAYLOAD = PayloadSelector.Include(["id", "passages", "sentences"])
SENTENCE_PAYLOAD = PayloadSelector.Include(["id"])
CHUNK_PAYLOAD = PayloadSelector.Include(["id", "content", "metadata"])


class PassageSettings(BaseModel):
    """How a long chunk is split for the dense index: windows of ``max_tokens`` word pieces
    (measured with the embedding model's tokenizer, its special tokens included) starting every
    ``stride`` word pieces (windows cut between words), the last one ending with the text; the
    chunk's title (its ``title`` metadata, or a short first line) leads every passage.

    With ``sentence_weight`` above 0 each chunk's sentences (``split_sentences``) are embedded
    too, and a chunk is scored by its best passage and its best sentence together: a short
    query that restates one sentence of a long chunk (a claim and its evidence) matches that
    sentence better than any 256-word-piece window around it."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(
        default=None,
        ge=32,
        description="word pieces per passage; default: what the model reads (256 for MiniLM)",
    )
    stride: int | None = Field(
        default=None,
        gt=0,
        description="word pieces between passage starts; default: a whole passage (no overlap "
        "but for the last passage, which ends with the text)",
    )
    sentence_weight: float = Field(
        default=DEFAULT_SENTENCE_WEIGHT,
        ge=0,
        le=1,
        description="a chunk's score is (1 - w) x its best passage's similarity + w x its best "
        "sentence's; its sentences are embedded at ingest into a second shard. 0.5 wins on the "
        "training splits (bench/FUSION-RESULTS.md); 0: no sentence vectors, best passage only",
    )


class QdrantEdgeSettings(BaseModel):
    """``backend_config`` of a ``qdrant_edge`` retriever."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(default=DEFAULT_PATH, min_length=1)
    collection: str = Field(default="parallel_rag", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    hnsw_ef: int = Field(
        default=256,
        gt=0,
        description="candidates kept while searching (256: recall@10 0.978 against exact "
        "search at 1M clustered vectors, where 128 gives 0.892, for about 0.1 ms more)",
    )
    m: int = Field(default=16, gt=0, description="HNSW edges per node")
    ef_construct: int = Field(
        default=200,
        gt=0,
        description="candidates while building the passage index (200: at 1M clustered vectors "
        "100 leaves some points out of every search's reach, recall@10 0.978 against exact "
        "search, where 200 gives 1.000, for about twice that shard's build time)",
    )
    sentence_ef_construct: int = Field(
        default=100,
        gt=0,
        description="candidates while building the sentence index (with a sentence weight "
        "above 0). It holds several points a chunk but only proposes candidates (every "
        "candidate's passage and sentence scores are then computed exactly), so it gets a "
        "cheaper build than the passage index",
    )
    candidates: int = Field(
        default=4,
        gt=0,
        description="with a sentence weight above 0: chunks the passage search, and sentences "
        "the sentence search, propose per result wanted; every proposed chunk is then scored "
        "exactly. A chunk of the mixed top k often ranks below k by its best passage alone, "
        "and a chunk of several passages or sentences fills several hits",
    )
    quantization: Literal["int8"] | None = Field(
        default="int8",
        description="a copy of every vector as 8-bit integers, held in memory, that the index "
        "searches on; the hits are then rescored with the stored vectors. The searches "
        "of a large collection read a quarter of the memory: at 1M chunks x 5 sentences the "
        "sentence index is 7.2 GB of float32 vectors, and a query reading parts of it no query "
        "of the process had read took 45-65 ms where the 8-bit copy takes a few. null: search the "
        "stored vectors themselves",
    )
    oversampling: float = Field(
        default=2.0,
        ge=1,
        description="with quantization: hits rescored with the stored vectors per hit wanted "
        "(at 1M vectors, 1: recall@10 0.95 against exact search; 2: 1.00)",
    )
    vector_datatype: Literal["float16", "float32"] = Field(
        default="float16",
        description="how a new collection stores its vectors. float16 halves the pages a write "
        "maps and a reader holds, at scores within about 1e-4 of float32's (the search runs on "
        "the 8-bit copy either way; the stored vectors only rescore it). A collection keeps "
        "the type it was created with: delete its folder and ingest again to change it",
    )
    segment_mb: int | None = Field(
        default=DEFAULT_SEGMENT_MB,
        ge=16,
        description="the largest segment a write builds in the chunk (passage) index, in MB of "
        "stored vectors: a write merges its points into segments up to this size, so it reads "
        "and rewrites at most about this much whatever the collection's size (what still "
        "grows is the engine's in-memory table of its points' ids, about 0.05 KB a point; "
        "the payload indexes are kept on disk); a search visits every segment, so fewer, "
        "larger ones search faster (about 1 ms a segment at 100k chunks). Smaller than the "
        "sentence index's because a passage also stores its chunk's text and metadata, more "
        "bytes than its vector. null: the "
        "engine's own merging, whose segments grow with the collection, so a write may read "
        "and rewrite most of it",
    )
    sentence_segment_mb: int | None = Field(
        default=DEFAULT_SENTENCE_SEGMENT_MB,
        ge=16,
        description="``segment_mb`` for the sentence index (with a sentence weight above 0): "
        "its points hold a vector and a chunk's id and metadata, and there are several a chunk, "
        "so its segments are larger and fewer",
    )
    full_scan_threshold_kb: int = Field(
        default=10_000,
        ge=0,
        description="segments smaller than this, in KB of float32 vectors (a count of vectors "
        "whatever ``vector_datatype``: 10,000 is 6,666 of 384 dimensions), are searched "
        "exactly; the engine indexes a segment from the same size",
    )
    passages: PassageSettings | None = Field(
        default_factory=PassageSettings,
        description="index chunks longer than the model reads as several passages, a chunk "
        "scored by its best passage (the default: it wins on the training splits); null: one "
        "vector per chunk, the model reading only its start",
    )

    def store_dir(self, base_dir: Path | None = None) -> Path:
        return resolve_path(self.path, base_dir).resolve() / self.collection


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
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

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
        encoded = self.tokenizer(body, add_special_tokens=False, return_offsets_mapping=True)
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
    batch: ChunkBatch,
    sentences: Sequence[Sequence[str]],
    model: str,
    device: str,
    stored: Path | None = None,
) -> list[Point]:
    """One point per sentence of each chunk (``sentences[i]`` are chunk ``i``'s), embedded
    with the shared model, each distinct text of the batch once (read from the ``stored``
    sentence vectors when they hold it); payload: the chunk id, its metadata (for filters and
    deletes) and the sentence number."""
    unique = list(dict.fromkeys(text for parts in sentences for text in parts))
    if not unique:
        return []
    embeddings = (
        load_stored_sentence_embeddings(stored, model, device)
        if stored is not None
        else load_embeddings(model, device)
    )
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


def edge_filter(filters: MetadataFilter | None) -> Filter | None:
    """Metadata equality filter (a tenant is one of them) as a Qdrant filter on the payload."""
    if not filters:
        return None
    conditions = []
    for key, value in filters.items():
        field = f"metadata.{key}"
        if isinstance(value, float) and not value.is_integer():
            conditions.append(FieldCondition(key=field, range=RangeFloat(gte=value, lte=value)))
        else:
            if isinstance(value, float):
                value = int(value)
            conditions.append(FieldCondition(key=field, match=MatchValue(value)))
    return Filter(must=conditions)


def files_filter(file_ids: Sequence[str]) -> Filter:
    return Filter(must=[FieldCondition(key="metadata.file_id", match=MatchAny(list(file_ids)))])


class OpenRevision:
    """One published revision, opened read-only for searching."""

    def __init__(self, directory: Path, revision: str):
        folder = directory / revision
        self.revision = revision
        self.manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        self.shard = EdgeShard.load(str(folder))
        sentences = folder / SENTENCES_DIR
        self.sentences = (
            EdgeShard.load(str(sentences)) if (sentences / "edge_config.json").is_file() else None
        )
        # stored cold so that ingest never reads a whole collection in; a reader wants it all
        populate_mapped(folder)


_open: LiveRevisions[OpenRevision] = LiveRevisions(
    lambda directory, revision: OpenRevision(directory, revision),
    lambda directory: (
        f"Qdrant Edge collection '{directory.name}' does not exist under {directory.parent}; "
        "run `parallel-rag ingest PATH...` first"
    ),
)


def open_revision(directory: Path) -> OpenRevision:
    """The live revision of a collection, opened once per process and reopened when
    ``CURRENT`` names a new one."""
    return _open.get(directory)


def stored_fingerprints(directory: Path, file_ids: Sequence[str]) -> set[Fingerprint]:
    """(chunk id, file id, ``chunk_hash``) of every chunk the files have in the live revision:
    what ingest compares with fresh chunks to leave unchanged files alone."""
    found: set[Fingerprint] = set()
    revision = current_revision(directory)
    if not file_ids or revision is None:
        return found
    # the passage shard alone, opened for this scroll and closed: ingest asks before every
    # batch and must not hold (or read in) a collection that may be larger than its memory
    shard = EdgeShard.load(str(directory / revision))
    try:
        offset = None
        while True:
            records, offset = shard.scroll(
                ScrollRequest(
                    offset=offset, limit=1024, filter=files_filter(file_ids), with_payload=True
                )
            )
            for record in records:
                payload = record.payload or {}
                metadata = payload.get("metadata") or {}
                found.add((payload.get("id"), metadata.get("file_id"), metadata.get("chunk_hash")))
            if offset is None:
                return found
    finally:
        shard.close()


INDEXED_FIELDS = ("id", "metadata.file_id")
"""Payload fields with a keyword index in every shard: a write deletes by them (the files it
replaces, the chunks it writes again) and ingest scrolls by file, and without an index each
of those reads every point's payload, the whole collection in every batch."""

KEYWORD_INDEX = KeywordIndexParams(on_disk=True, enable_hnsw=False)
"""How those indexes are kept: in mapped files, read a page at a time by the lookups that use
them (a write's deletes, ingest's scroll by file; no search does). Kept in memory, the engine
holds every indexed segment's two indexes whenever it opens a shard: at 100k chunks x 5
sentences, 106 MB of a write's heap against 28 MB on disk, and that part of ingest's peak
memory grew with the collection. ``enable_hnsw=False``: nothing filters a search by them, so
no index links are built for their values."""


def index_payload(shard: EdgeShard) -> None:
    """Give ``shard`` the ``INDEXED_FIELDS`` indexes it lacks or keeps otherwise than
    ``KEYWORD_INDEX`` says (a shard written before they were kept, or kept in memory, gets
    them, built once, at its next write)."""
    have = shard.info().payload_schema
    for field in INDEXED_FIELDS:
        params = have[field].params if field in have else None
        if params is None or not params.on_disk:
            shard.update(UpdateOperation.create_field_index(field, KEYWORD_INDEX))


DATATYPES = {"float16": VectorStorageDatatype.Float16, "float32": VectorStorageDatatype.Float32}
VALUE_BYTES = {"float16": 2, "float32": 4}


def float32_kb(kb: int, datatype: str) -> int:
    """``kb`` of float32 vectors as KB of ``datatype`` ones: the engine's indexing and
    full-scan thresholds count stored bytes, and a threshold means a number of vectors."""
    return kb * VALUE_BYTES[datatype] // VALUE_BYTES["float32"]


def stored_datatype(folder: Path) -> str | None:
    """The vector type a shard was created with (its ``edge_config.json``; the engine refuses
    to load a shard under another), or None when ``folder`` holds no shard."""
    config = folder / "edge_config.json"
    if not config.is_file():
        return None
    vectors = json.loads(config.read_text(encoding="utf-8"))["vectors"][""]
    return vectors.get("datatype", "float32")


def shard_config(
    settings: QdrantEdgeSettings,
    dimension: int,
    ef_construct: int,
    segment_mb: int | None,
    datatype: str | None = None,
) -> EdgeConfig:
    """A shard's engine settings; ``ef_construct`` and ``segment_mb`` are the passage or the
    sentence shard's, ``datatype`` an existing shard's vector type (a new one takes
    ``settings``')."""
    datatype = datatype or settings.vector_datatype
    threshold = float32_kb(settings.full_scan_threshold_kb, datatype)
    return EdgeConfig(
        # everything stored cold (mapped, read on first touch): a write opens the whole
        # collection and must not read it in; a reader reads its revision in when it opens it
        # (``OpenRevision``: ``mapped_files.populate_mapped``), as ``cached`` storage would
        vectors=EdgeVectorParams(
            size=dimension,
            distance=Distance.Cosine,
            memory=Memory.Cold,
            datatype=DATATYPES[datatype],
        ),
        hnsw_config=HnswIndexConfig(
            m=settings.m,
            ef_construct=ef_construct,
            full_scan_threshold=threshold,
        ),
        quantization_config=ScalarQuantizationConfig(
            type=ScalarType.Int8, quantile=0.99, memory=Memory.Cold
        )
        if settings.quantization == "int8"
        else None,
        max_search_threads=1,  # one request, one core: parallelism comes from the branches
        wal_enabled=False,  # revisions are published complete; a WAL would lock out readers
        # payloads too: every search reads its hits' payloads, and unread, a query meeting
        # points no earlier query met paid about one disk read per hit (5 of 14 ms at 100k
        # chunks x 5 sentences), so readers read them in at open with the rest
        payload_memory=Memory.Cold,
        optimizers=EdgeOptimizersConfig(
            indexing_threshold=threshold,
            max_segment_size=segment_mb * 1024 if segment_mb else None,
        ),
    )


def write_chunks(
    settings: QdrantEdgeSettings,
    base_dir: Path | None,
    *,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]] | None,
    replace_file_ids: Sequence[str],
    embedding_model: str = BUNDLED,
    device: str = "cpu",
    sentence_vectors: Path | None = None,
) -> None:
    """Publish a new revision: the live one with every chunk of ``replace_file_ids`` deleted
    (all its passages) and the given chunks upserted (as passages when ``settings.passages``
    says so), its HNSW index built. Sentence vectors stored in ``sentence_vectors`` (the file
    ingest fills for the generator, the same model and sentences) are read, not embedded
    again.

    Points are made and embedded ``WRITE_BATCH`` chunks at a time as they are upserted, so a
    write's memory is the engine's plus one batch, whatever the collection's size; the cost is
    that embedding runs under the write lock (another writer waits, readers do not)."""
    directory = settings.store_dir(base_dir)
    identity = embedding_identity(embedding_model)
    batch = ChunkBatch(ids=ids, texts=texts, metadatas=metadatas, vectors=vectors)
    weight = settings.passages.sentence_weight if settings.passages is not None else 0.0
    counts = [len(split_sentences(text)) for text in texts] if weight > 0 else None

    def passage_batches() -> Iterator[list[Point]]:
        """The passage shard's points, ``WRITE_BATCH`` chunks at a time: a collection of a
        million chunks (six million points with their sentences) is never held as points."""
        for start in range(0, len(ids), WRITE_BATCH):
            part = batch.part(start, start + WRITE_BATCH)
            if settings.passages is None:
                yield chunk_points(part)
                continue
            part_counts = counts[start : start + WRITE_BATCH] if counts is not None else None
            yield passage_points(part, settings.passages, embedding_model, device, part_counts)

    def sentence_batches() -> Iterator[list[Point]]:
        """The sentence shard's points, the sentences of ``WRITE_BATCH`` chunks at a time."""
        for start in range(0, len(ids), WRITE_BATCH):
            part = batch.part(start, start + WRITE_BATCH)
            split = [split_sentences(text) for text in part.texts]
            yield sentence_points(part, split, embedding_model, device, sentence_vectors)

    passages = settings.passages.model_dump() if settings.passages is not None else None
    with write_lock(directory):  # also removes what a writer killed halfway left
        old = current_revision(directory)
        manifest = (
            json.loads((directory / old / MANIFEST_FILE).read_text(encoding="utf-8"))
            if old
            else None
        )
        if manifest is not None and manifest["embedding"] != identity:
            raise ValueError(
                f"Qdrant Edge collection '{settings.collection}' holds {manifest['embedding']} "
                f"embeddings; refusing to add {identity} ones"
            )
        if manifest is None and not ids:
            return
        dimension = manifest["dimension"] if manifest else len(vectors[0])
        revision = new_revision()

        def apply(
            folder: Path,
            existing: bool,
            new_points: Iterable[list[Point]],
            ef_construct: int,
            segment_mb: int | None,
        ) -> int:
            """Deletes and upserts on one shard of the staging revision (the points come in
            batches, each embedded as it is reached); its point count."""
            datatype = stored_datatype(folder) if existing else None
            config = shard_config(settings, dimension, ef_construct, segment_mb, datatype)
            if existing:
                shard = EdgeShard.load(str(folder), config)
            else:
                folder.mkdir(parents=True, exist_ok=True)
                shard = EdgeShard.create(str(folder), config)
            try:
                index_payload(shard)
                if replace_file_ids:
                    shard.update(
                        UpdateOperation.delete_points_by_filter(files_filter(replace_file_ids))
                    )
                if existing and ids:  # a chunk written again may now have fewer passages
                    for start in range(0, len(ids), WRITE_BATCH):
                        written = [str(i) for i in ids[start : start + WRITE_BATCH]]
                        shard.update(
                            UpdateOperation.delete_points_by_filter(
                                Filter(must=[FieldCondition(key="id", match=MatchAny(written))])
                            )
                        )
                for part in new_points:
                    if part:
                        shard.update(UpdateOperation.upsert_points(part))
                shard.optimize()
                shard.flush()
                return shard.info().points_count
            finally:
                shard.close()

        def fill(staging: Path) -> None:
            if old:
                shutil.copytree(directory / old, staging, dirs_exist_ok=True)
            count = apply(
                staging, bool(old), passage_batches(), settings.ef_construct, settings.segment_mb
            )
            sentence_dir = staging / SENTENCES_DIR
            if counts is not None:
                # a sentence shard needs every chunk's sentences: ingest writes every file
                # again when the passage settings change (QdrantEdgeStore.fingerprints)
                existing = (sentence_dir / "edge_config.json").is_file()
                sentence_count = apply(
                    sentence_dir,
                    existing,
                    sentence_batches(),
                    settings.sentence_ef_construct,
                    settings.sentence_segment_mb,
                )
            else:
                shutil.rmtree(sentence_dir, ignore_errors=True)
                sentence_count = 0
            record = {
                "embedding": identity,
                "dimension": dimension,
                "chunks": count,  # points: a chunk split into passages counts each
                "passages": passages,
                "sentences": sentence_count,
            }
            write_file(staging / MANIFEST_FILE, json.dumps(record))

        publish(directory, revision, fill, previous=old)  # kept for readers still holding it


class QdrantEdgeRetriever(DenseStoreRetriever):
    """Dense retriever over a Qdrant Edge collection; usable alone in any LangChain chain."""

    reads_revisions: ClassVar[bool] = True  # held for a graph run: revisions.py

    settings: QdrantEdgeSettings = Field(default_factory=QdrantEdgeSettings)

    def warm_up(self) -> None:
        """Open the live revision now: loading a shard reads its vectors, the 8-bit copies
        and the payloads into memory (see ``SearchKwargsRetriever.warm_up``)."""
        open_revision(self.settings.store_dir(self.base_dir))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        held = open_revision(self.settings.store_dir(self.base_dir))
        store = f"Qdrant Edge collection '{self.settings.collection}'"
        self.check_built_with(held.manifest["embedding"], store)
        embedded = load_embeddings(self.embedding_model, self.device).embed_query(query)
        vector = [float(x) for x in embedded]
        k = k or self.k
        weight = sentence_weight(held)
        # a sentence-weighted score is settled after the search: no threshold on the passages
        threshold = None if weight else self.score_threshold
        if weight:
            wanted = limit = k * self.settings.candidates
        else:  # a chunk indexed as passages has several points: ask for more
            wanted, limit = k, k * PASSAGE_OVERFETCH if held.manifest.get("passages") else k
        best = self._best_passages(held, vector, wanted, limit, filters, threshold)
        if weight:
            found = [scored_hit(hit) for hit in best.values()]
            ranked = mixed_scores(held, vector, found, k, filters, weight, self.settings)
            if self.score_threshold is not None:
                ranked = [h for h in ranked if h["score"] >= self.score_threshold]
            top = ranked[:k]
        else:
            top = [scored_hit(hit) for hit in list(best.values())[:k]]
        records = chunk_records(held.shard, [h["id"] for h in top if h["content"] is None])
        documents = []
        for h in top:
            content, metadata = h["content"], h["metadata"]
            if content is None:
                record = records.get(h["id"], {})
                content, metadata = record.get("content", ""), record.get("metadata") or {}
            documents.append(scored_document(h["id"], content, metadata or {}, h["score"]))
        return documents

    def _best_passages(
        self,
        held: OpenRevision,
        vector: list[float],
        wanted: int,
        limit: int,
        filters: MetadataFilter | None,
        threshold: float | None,
    ) -> dict[str, Any]:
        """The best ``wanted`` or more chunks by their best passage (chunk id -> that hit):
        ``limit`` points first, twice as many while they collapse to fewer chunks."""
        total = held.manifest.get("chunks") or limit
        while True:
            hits = held.shard.query(
                QueryRequest(
                    limit=limit,
                    query=Query.Nearest(vector),
                    filter=edge_filter(filters),
                    score_threshold=threshold,
                    params=search_params(self.settings, limit),
                    with_payload=RANKING_PAYLOAD,
                )
            )
            best = best_per_chunk(hits)
            if len(best) >= wanted or len(hits) < limit or limit >= total:
                return best
            limit = min(limit * 2, total)


def search_params(settings: QdrantEdgeSettings, limit: int) -> SearchParams:
    """An index search's parameters: a beam of ``hnsw_ef`` (at least the hits wanted) and, with
    ``quantization``, ``oversampling`` times the hits rescored with the stored vectors, so the
    scores returned are the vectors' own; without, the stored vectors alone, even where a
    segment built earlier holds 8-bit copies."""
    if settings.quantization:
        quantization = QuantizationSearchParams(rescore=True, oversampling=settings.oversampling)
    else:
        quantization = QuantizationSearchParams(ignore=True)
    return SearchParams(hnsw_ef=max(settings.hnsw_ef, limit), quantization=quantization)


def sentence_weight(held: OpenRevision) -> float:
    """The revision's sentence weight: 0 when it has no sentence shard (built without one,
    or before sentences existed)."""
    if not held.manifest.get("sentences") or held.sentences is None:
        return 0.0
    return float((held.manifest.get("passages") or {}).get("sentence_weight") or 0.0)


def scored_hit(hit: Any) -> dict[str, Any]:
    """A chunk as the search met it: id, content and metadata (None unless the hit carries
    them: searches read only ``RANKING_PAYLOAD``), score (its best passage), and its sentence
    count when the payload says."""
    payload = hit.payload or {}
    return {
        "id": payload.get("id", str(hit.id)),
        "content": payload.get("content"),
        "metadata": payload.get("metadata"),
        "score": float(hit.score),
        "sentences": payload.get("sentences"),
    }


def _best_per_chunk(
    shard: EdgeShard,
    owners: dict[uuid.UUID, str],
    vector: list[float],
    payload: PayloadSelector | bool = False,
) -> dict[str, tuple[float, Any]]:
    """Per chunk, the highest similarity between ``vector`` and its points among ``owners``
    (point UUID -> chunk id), with that point's hit: one exact search restricted to those ids,
    so the shard scores them where the vectors live (none is copied out) and every one of
    them is scored, whatever the index would have visited."""
    if not owners:
        return {}
    hits = shard.query(
        QueryRequest(
            limit=len(owners),
            query=Query.Nearest(vector),
            filter=Filter(must=[HasIdCondition(set(owners))]),
            # the stored vectors, not their 8-bit copies: these scores are the ranking
            params=SearchParams(exact=True, quantization=QuantizationSearchParams(ignore=True)),
            with_payload=payload,
        )
    )
    best: dict[str, tuple[float, Any]] = {}
    for hit in hits:  # best first: a chunk's first hit is its best point
        chunk = owners.get(hit.id)  # a UUID: no text made per hit
        if chunk is not None and chunk not in best:
            best[chunk] = (float(hit.score), hit)
    return best


def mixed_scores(
    held: OpenRevision,
    vector: list[float],
    found: list[dict[str, Any]],
    k: int,
    filters: MetadataFilter | None,
    weight: float,
    settings: QdrantEdgeSettings,
) -> list[dict[str, Any]]:
    """Chunks scored ``(1 - weight) x best passage + weight x best sentence``, best first.

    Candidates are the chunks the passage search found and those the sentence shard's search
    finds (``settings.candidates`` sentences per chunk wanted); a candidate the passage search
    missed gets its passage score computed exactly from its stored vectors, and every
    candidate its best sentence over all its stored sentence vectors. A chunk without
    sentences is scored by its best passage alone."""
    assert held.sentences is not None
    limit = k * settings.candidates
    hits = held.sentences.query(
        QueryRequest(
            limit=limit,
            query=Query.Nearest(vector),
            filter=edge_filter(filters),
            params=search_params(settings, limit),
            with_payload=SENTENCE_PAYLOAD,
        )
    )
    candidates = {h["id"]: h for h in found}
    # met by a sentence only: its passages (the first one carries the count and the content)
    unmet = [chunk for chunk in best_per_chunk(hits) if chunk not in candidates]
    firsts = _best_per_chunk(
        held.shard,
        {uuid.UUID(point_id(chunk)): chunk for chunk in unmet},
        vector,
        payload=RANKING_PAYLOAD,
    )
    later = {
        key: chunk
        for chunk, (_, record) in firsts.items()
        for key in passage_uuids(chunk, range(1, int((record.payload or {}).get("passages") or 1)))
    }
    others = _best_per_chunk(held.shard, later, vector)
    for chunk in unmet:
        if chunk not in firsts:
            continue  # not in the passage shard (a half-deleted chunk): skip it
        score, record = firsts[chunk]
        first = record.payload or {}
        candidates[chunk] = {
            "id": chunk,
            "content": first.get("content"),
            "metadata": first.get("metadata"),
            "score": max(score, others[chunk][0]) if chunk in others else score,
            "sentences": first.get("sentences"),
        }
    # every candidate's best sentence from all its sentences: the sentence search proposes a
    # chunk by the sentences it returned, which need not include the chunk's best one (at 1M
    # chunks x 5 sentences, scoring a chunk by its best returned sentence cost recall@10
    # 0.944 -> 0.887 as the search went deeper and met more chunks by a lesser sentence)
    wanted = {
        key: chunk
        for chunk, hit in candidates.items()
        if hit["sentences"]
        for key in sentence_uuids(chunk, int(hit["sentences"]))
    }
    best_sentence = {
        chunk: score
        for chunk, (score, _) in _best_per_chunk(held.sentences, wanted, vector).items()
    }
    ranked = []
    for position, (chunk, hit) in enumerate(candidates.items()):
        sentence = best_sentence.get(chunk)
        passage = hit["score"]
        score = passage if sentence is None else (1 - weight) * passage + weight * sentence
        ranked.append((-score, position, {**hit, "score": score}))
    return [entry for _, _, entry in sorted(ranked, key=lambda e: (e[0], e[1]))]


def best_per_chunk(hits: Sequence[Any]) -> dict[str, Any]:
    """Hits collapsed to one per chunk (its best-scoring passage), best chunk first."""
    best: dict[str, Any] = {}
    for hit in hits:  # the shard returns hits best first
        payload = hit.payload or {}
        best.setdefault(payload["id"] if "id" in payload else str(hit.id), hit)
    return best


def chunk_records(shard: EdgeShard, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Content and metadata of chunks (chunk id -> payload), read from each chunk's own point,
    passage 0, which alone carries the content."""
    if not ids:
        return {}
    records = shard.retrieve(
        [point_id(i) for i in ids], with_payload=CHUNK_PAYLOAD, with_vector=False
    )
    return {(r.payload or {}).get("id"): r.payload or {} for r in records}


class QdrantEdgeStore(SettingsStore):
    """Ingest's writer for a Qdrant Edge collection."""

    def open(self) -> None:
        """Nothing to take ahead: a write holds the collection's file lock while it runs and
        removes what a killed writer left."""

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint] | None:
        """None (write every file again) when the collection was split into passages
        differently from what the settings now ask."""
        directory = self.settings.store_dir(self.context.base_dir)
        revision = current_revision(directory)
        if revision is not None:
            wanted = self.settings.passages.model_dump() if self.settings.passages else None
            manifest = json.loads((directory / revision / MANIFEST_FILE).read_text("utf-8"))
            if manifest.get("passages") != wanted:
                return None
        return stored_fingerprints(directory, file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        write_chunks(
            self.settings,
            self.context.base_dir,
            **batch.columns(),
            replace_file_ids=replace_file_ids,
            embedding_model=self.context.embedding_model,
            device=self.context.device,
            sentence_vectors=self.context.sentence_vectors,
        )


BACKEND = BackendSpec(
    name="qdrant_edge",
    settings=QdrantEdgeSettings,
    factory=settings_factory(QdrantEdgeRetriever),
    kind=QdrantEdgeRetriever.retrieval_kind,
    store=QdrantEdgeStore,
    locations=current_file_of,
    evaluable=True,
)
