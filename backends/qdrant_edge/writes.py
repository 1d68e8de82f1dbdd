"""Writing a Qdrant Edge collection (``qdrant_edge``): each write publishes a new revision, the
live one copied, with the replaced files' chunks deleted and the new chunks upserted, its
indexes built, so readers never see a shard half written (the layout is ``qdrant_edge``'s).

Segments are capped (``segment_mb``, ``sentence_segment_mb``), so a write rebuilds at most a
segment's worth whatever the collection's size, and the payload indexes a write deletes by are
kept on disk: what a write holds in memory is a batch of points and the engine's id table.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallel_rag.backends.base import ChunkBatch, Fingerprint, SentenceSource
from parallel_rag.backends.encoders.embeddings import BUNDLED, embedding_identity
from parallel_rag.backends.qdrant_edge.points import (
    WRITE_BATCH,
    chunk_points,
    passage_points,
    sentence_points,
)
from parallel_rag.backends.shared.atomic_files import write_file
from parallel_rag.backends.shared.revisions import (
    current_revision,
    new_revision,
    publish,
    write_lock,
)
from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HnswIndexConfig,
    KeywordIndexParams,
    MatchAny,
    Memory,
    Point,
    ScalarQuantizationConfig,
    ScalarType,
    ScrollRequest,
    UpdateOperation,
    VectorStorageDatatype,
)

if TYPE_CHECKING:
    from parallel_rag.backends.qdrant_edge.settings import QdrantEdgeSettings

MANIFEST_FILE = "parallel_rag.json"  # a revision's embedding identity, dimension and counts
SENTENCES_DIR = "sentences"  # the revision's sentence shard, beside the passage shard's files


def files_filter(file_ids: Sequence[str]) -> Filter:
    """The points of every chunk of these files (what a write replaces, ingest compares)."""
    return Filter(must=[FieldCondition(key="metadata.file_id", match=MatchAny(list(file_ids)))])


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
    sentences: SentenceSource | None = None,
) -> None:
    """Publish a new revision: the live one with every chunk of ``replace_file_ids`` deleted
    (all its passages) and the given chunks upserted (as passages when ``settings.passages``
    says so), its HNSW index built. With a sentence weight above 0, each chunk's sentences
    are cut and embedded by ``sentences`` (the generator's, handed over by ingest: the same
    sentences it scores, their stored vectors read, not embedded again).

    Points are made and embedded ``WRITE_BATCH`` chunks at a time as they are upserted, so a
    write's memory is the engine's plus one batch, whatever the collection's size; the cost is
    that embedding runs under the write lock (another writer waits, readers do not)."""
    directory = settings.store_dir(base_dir)
    identity = embedding_identity(embedding_model)
    batch = ChunkBatch(ids=ids, texts=texts, metadatas=metadatas, vectors=vectors)
    weight = settings.passages.sentence_weight if settings.passages is not None else 0.0
    counts: list[int] | None = None
    if weight > 0:  # a write that only deletes needs no sentences
        if texts and sentences is None:
            raise ValueError(
                f"Qdrant Edge collection '{settings.collection}': passages.sentence_weight "
                f"{weight} needs the generator's sentences (write_chunks(sentences=...); "
                "ingest hands them over in BackendContext.sentences)"
            )
        counts = [len(sentences.split(text)) for text in texts] if sentences else []

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
            assert sentences is not None  # checked above
            split = [sentences.split(text) for text in part.texts]
            yield sentence_points(part, split, sentences)

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
