"""``qdrant_edge``: Qdrant's own engine in-process (``qdrant-edge-py``): an HNSW index with
payload filters, on disk, no server. Kind: **dense**. ``similarity_threshold`` becomes the
search's ``score_threshold`` (cosine similarity).

The embedded dense store for corpora past a few thousand chunks: at 100k clustered 384-d
vectors a search takes about a millisecond at recall@10 1.0 against exact search (see
``bench/ANN-RESULTS.md``), where Qdrant local mode scans every vector. Small collections (below
``full_scan_threshold_kb``) are searched exactly. For several processes writing at once, or a
corpus that outgrows one machine, move to a Qdrant server (the ``qdrant`` backend with ``url:``).

Layout under ``path`` (default ``.parallel-rag/qdrant_edge``)::

    COLLECTION/CURRENT               the live revision's directory name (replaced atomically)
    COLLECTION/<revision>/           one Qdrant Edge shard (segments, WAL, its config)
    COLLECTION/<revision>/parallel_rag.json   embedding identity, dimension, chunk count

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

import fcntl
import json
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.atomic_files import STAGING_MARK, write_directory, write_file
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
from parallel_rag.backends.embeddings import BUNDLED, embedding_identity, load_embeddings
from pydantic import BaseModel, ConfigDict, Field
from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HnswIndexConfig,
    MatchAny,
    MatchValue,
    Point,
    Query,
    QueryRequest,
    RangeFloat,
    ScrollRequest,
    SearchParams,
    UpdateOperation,
)

DEFAULT_PATH = ".parallel-rag/qdrant_edge"
CURRENT_FILE = "CURRENT"
MANIFEST_FILE = "parallel_rag.json"
REVISION_PREFIX = "rev-"
WRITE_BATCH = 1024


class QdrantEdgeSettings(BaseModel):
    """``backend_config`` of a ``qdrant_edge`` retriever."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(default=DEFAULT_PATH, min_length=1)
    collection: str = Field(default="parallel_rag", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    hnsw_ef: int = Field(default=128, gt=0, description="candidates kept while searching")
    m: int = Field(default=16, gt=0, description="HNSW edges per node")
    ef_construct: int = Field(default=100, gt=0, description="candidates while building")
    full_scan_threshold_kb: int = Field(
        default=10_000, ge=0, description="segments smaller than this are searched exactly"
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


def current_revision(directory: Path) -> str | None:
    try:
        return (directory / CURRENT_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


class OpenRevision:
    """One published revision, opened read-only for searching."""

    def __init__(self, directory: Path, revision: str):
        folder = directory / revision
        self.revision = revision
        self.manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        self.shard = EdgeShard.load(str(folder))


_open: dict[Path, OpenRevision] = {}
_open_lock = threading.Lock()


def open_revision(directory: Path) -> OpenRevision:
    """The live revision of a collection, opened once per process and reopened when
    ``CURRENT`` names a new one."""
    revision = current_revision(directory)
    if revision is None:
        raise LookupError(
            f"Qdrant Edge collection '{directory.name}' does not exist under {directory.parent}; "
            "run `parallel-rag ingest PATH...` first"
        )
    with _open_lock:
        held = _open.get(directory)
        if held is None or held.revision != revision:
            held = _open[directory] = OpenRevision(directory, revision)
        return held


@contextmanager
def write_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stored_fingerprints(directory: Path, file_ids: Sequence[str]) -> set[Fingerprint]:
    """(chunk id, file id, ``chunk_hash``) of every chunk the files have in the live revision:
    what ingest compares with fresh chunks to leave unchanged files alone."""
    found: set[Fingerprint] = set()
    if not file_ids or current_revision(directory) is None:
        return found
    shard = open_revision(directory).shard
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


def shard_config(settings: QdrantEdgeSettings, dimension: int) -> EdgeConfig:
    return EdgeConfig(
        vectors=EdgeVectorParams(size=dimension, distance=Distance.Cosine),
        hnsw_config=HnswIndexConfig(
            m=settings.m,
            ef_construct=settings.ef_construct,
            full_scan_threshold=settings.full_scan_threshold_kb,
        ),
        max_search_threads=1,  # one request, one core: parallelism comes from the branches
        wal_enabled=False,  # revisions are published complete; a WAL would lock out readers
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
) -> None:
    """Publish a new revision: the live one with every chunk of ``replace_file_ids`` deleted
    and the given chunks upserted, its HNSW index built."""
    directory = settings.store_dir(base_dir)
    identity = embedding_identity(embedding_model)
    with write_lock(directory):
        for stale in directory.glob(f".{REVISION_PREFIX}*{STAGING_MARK}*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a writer killed halfway
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
        revision = f"{REVISION_PREFIX}{time.time_ns()}-{uuid.uuid4().hex[:8]}"

        def fill(staging: Path) -> None:
            if old:
                shutil.copytree(directory / old, staging, dirs_exist_ok=True)
                shard = EdgeShard.load(str(staging), shard_config(settings, dimension))
            else:
                shard = EdgeShard.create(str(staging), shard_config(settings, dimension))
            try:
                if replace_file_ids:
                    shard.update(
                        UpdateOperation.delete_points_by_filter(files_filter(replace_file_ids))
                    )
                for start in range(0, len(ids), WRITE_BATCH):
                    points = [
                        Point(
                            point_id(ids[i]),
                            [float(x) for x in vectors[i]],
                            {
                                "id": str(ids[i]),
                                "content": texts[i],
                                "metadata": dict(metadatas[i]),
                            },
                        )
                        for i in range(start, min(start + WRITE_BATCH, len(ids)))
                    ]
                    shard.update(UpdateOperation.upsert_points(points))
                shard.optimize()
                shard.flush()
                chunks = shard.info().points_count
            finally:
                shard.close()
            record = {"embedding": identity, "dimension": dimension, "chunks": chunks}
            write_file(staging / MANIFEST_FILE, json.dumps(record))

        write_directory(directory / revision, fill)
        write_file(directory / CURRENT_FILE, revision)
        # keep the previous revision for readers still holding it; drop older ones
        for child in directory.iterdir():
            if child.name.startswith(REVISION_PREFIX) and child.name not in {revision, old}:
                shutil.rmtree(child, ignore_errors=True)


class QdrantEdgeRetriever(DenseStoreRetriever):
    """Dense retriever over a Qdrant Edge collection; usable alone in any LangChain chain."""

    settings: QdrantEdgeSettings = Field(default_factory=QdrantEdgeSettings)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        held = open_revision(self.settings.store_dir(self.base_dir))
        identity = embedding_identity(self.embedding_model)
        if held.manifest["embedding"] != identity:
            raise ValueError(
                f"Qdrant Edge collection '{self.settings.collection}' was built with "
                f"{held.manifest['embedding']}, the pipeline embeds with {identity}"
            )
        vector = load_embeddings(self.embedding_model, self.device).embed_query(query)
        hits = held.shard.query(
            QueryRequest(
                limit=k or self.k,
                query=Query.Nearest([float(x) for x in vector]),
                filter=edge_filter(filters),
                score_threshold=self.score_threshold,
                params=SearchParams(hnsw_ef=max(self.settings.hnsw_ef, k or self.k)),
                with_payload=True,
            )
        )
        return [
            scored_document(
                hit.payload.get("id", str(hit.id)),
                hit.payload.get("content", ""),
                hit.payload.get("metadata") or {},
                hit.score,
            )
            for hit in hits
        ]


class QdrantEdgeStore(SettingsStore):
    """Ingest's writer for a Qdrant Edge collection."""

    def open(self) -> None:
        """Nothing to take ahead: a write holds the collection's file lock while it runs and
        removes what a killed writer left."""

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint]:
        return stored_fingerprints(self.settings.store_dir(self.context.base_dir), file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        write_chunks(
            self.settings,
            self.context.base_dir,
            **batch.columns(),
            replace_file_ids=replace_file_ids,
            embedding_model=self.context.embedding_model,
        )


BACKEND = BackendSpec(
    name="qdrant_edge",
    settings=QdrantEdgeSettings,
    factory=settings_factory(QdrantEdgeRetriever),
    kind=QdrantEdgeRetriever.retrieval_kind,
    store=QdrantEdgeStore,
)
