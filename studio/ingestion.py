"""``ingest``: read files once, chunk them, and write the same chunks into every configured
index (BM25, Qdrant, Milvus and managed vector stores, including those a ``hybrid`` uses),
replacing earlier chunks of the same files. ``store=NAME`` (``parallel-rag ingest --store
NAME``) writes into the managed vector store ``NAME`` only, creating it if needed.

All files are read and validated, embedded (once, shared by all dense stores) and every store
opened before anything is written, so a bad file, a missing model or a store another process
holds leaves every index as it was. Chunk ids are stable and each index replaces a file's
chunks as a whole, so an ingest killed halfway converges when run again: every chunk present
exactly once, the same ids in every index.

Re-ingesting unchanged files changes nothing: every chunk carries a ``chunk_hash`` of its text,
metadata and embedding model; a vector store that already holds a file's chunks with the same
ids and hashes is not written for that file, and those chunks are not embedded again (a file
half-written by a killed ingest has missing points, so it counts as changed).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallel_rag.backends.bm25 import BM25Index, recover_interrupted_save
from parallel_rag.studio.document_loading import (
    Chunk,
    DocumentLoadError,
    discover_files,
    file_id_for,
    load_chunks,
)
from parallel_rag.backends.embeddings import embedding_identity, load_embeddings
from parallel_rag.backends.milvus import open_store as open_milvus_store
from parallel_rag.backends.milvus import stored_fingerprints as milvus_fingerprints
from parallel_rag.backends.milvus import write_chunks as write_milvus_chunks
from parallel_rag.backends.qdrant import shared_client, write_chunks
from parallel_rag.backends.qdrant import stored_fingerprints as qdrant_fingerprints
from parallel_rag.backends.vectorstore import DEFAULT_ROOT
from parallel_rag.backends.vectorstore import stored_fingerprints as store_fingerprints
from parallel_rag.backends.vectorstore import write_chunks as write_store_chunks
from parallel_rag.graph.components import resolve_path
from parallel_rag.graph.configuration import (
    BM25Entry,
    ConfigError,
    HybridEntry,
    MilvusEntry,
    PipelineConfig,
    QdrantEntry,
    RetrieverEntry,
    VectorStoreEntry,
)
from tqdm.auto import tqdm

EMBED_BATCH = 64


@dataclass
class IngestReport:
    """What an ingest run wrote."""

    files: list[str] = field(default_factory=list)
    chunks: int = 0
    indexes: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # indexes that already held it all
    embedded: int = 0  # chunks embedded (unchanged files are not)


Fingerprint = tuple[str, str, str | None]  # (chunk id, file id, chunk hash)


def add_chunk_hashes(chunks: Sequence[Chunk], embedding_model: str) -> None:
    """Stamp each chunk with a hash of what its index entries are made of."""
    identity = embedding_identity(embedding_model)
    for chunk in chunks:
        chunk.metadata.pop("chunk_hash", None)
        payload = json.dumps(
            [chunk.content, chunk.metadata, identity], sort_keys=True, ensure_ascii=False
        )
        chunk.metadata["chunk_hash"] = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def by_file(fingerprints: Iterable[Fingerprint]) -> dict[str, set[Fingerprint]]:
    grouped: dict[str, set[Fingerprint]] = defaultdict(set)
    for fingerprint in fingerprints:
        grouped[fingerprint[1]].add(fingerprint)
    return grouped


def changed_files(
    fresh: dict[str, set[Fingerprint]], file_ids: set[str], stored: set[Fingerprint]
) -> set[str]:
    """The files whose chunks in an index (``stored``) differ from ``fresh`` (ids or hashes)."""
    held = by_file(stored)
    return {f for f in file_ids if fresh.get(f, set()) != held.get(f, set())}


def stored_in(
    entry: RetrieverEntry, config: PipelineConfig, base_dir: Path, file_ids: set[str]
) -> set[Fingerprint]:
    """What a vector store holds for the files."""
    ids = sorted(file_ids)
    if isinstance(entry, QdrantEntry):
        return qdrant_fingerprints(entry.backend_config, base_dir, ids)
    if isinstance(entry, MilvusEntry):
        return milvus_fingerprints(
            entry.backend_config,
            base_dir,
            ids,
            embedding_model=config.embeddings.model,
            device=config.embeddings.device,
        )
    assert isinstance(entry, VectorStoreEntry)
    return store_fingerprints(entry.backend_config.store_dir(base_dir), ids)


def replace_in_bm25(
    entry: BM25Entry, base_dir: Path, chunks: Sequence[Chunk], file_ids: set[str]
) -> bool:
    """Rebuild the BM25 index with the files' old chunks swapped for the new ones; False (and
    nothing written) when they are the same chunks under the same parameters."""
    settings = entry.backend_config
    path = Path(resolve_path(settings.index_path, base_dir))
    kept: list[tuple[str, str, dict[str, Any]]] = []
    fresh = [(c.id, c.content, c.metadata) for c in chunks]
    if path.exists():
        existing = BM25Index.load(path, "bm25s")  # only its chunks are needed
        kept, old = [], []
        for c in existing.chunks:
            replaced = c.metadata.get("file_id") in file_ids
            (old if replaced else kept).append((c.id, c.content, c.metadata))
        if old == fresh and (existing.k1, existing.b) == (settings.k1, settings.b):
            return False
    merged = kept + fresh
    index = BM25Index.from_chunks(merged, engine=settings.engine, k1=settings.k1, b=settings.b)
    index.save(path)
    return True


WRITABLE = (BM25Entry, QdrantEntry, MilvusEntry, VectorStoreEntry)
DENSE_TARGETS = (QdrantEntry, MilvusEntry, VectorStoreEntry)


def writable_targets(config: PipelineConfig) -> list[RetrieverEntry]:
    """Every index ingest can write, a hybrid's primary and fallback included, each once."""
    found: list[RetrieverEntry] = []
    for entry in config.retrievers:
        legs = [entry]
        if isinstance(entry, HybridEntry):
            legs = [entry.backend_config.primary, entry.backend_config.fallback]
        found.extend(leg for leg in legs if isinstance(leg, WRITABLE))
    unique: dict[str, RetrieverEntry] = {}
    for entry in found:
        unique.setdefault(f"{entry.backend}:{entry.backend_config.model_dump_json()}", entry)
    return list(unique.values())


def store_root(config: PipelineConfig) -> str:
    """Where managed vector stores live: the first configured vectorstore's root, else the
    default."""
    for entry in writable_targets(config):
        if isinstance(entry, VectorStoreEntry):
            return entry.backend_config.root
    return DEFAULT_ROOT


def embed_chunks(
    chunks: Sequence[Chunk], model: str, device: str, progress: bool
) -> list[list[float]]:
    embeddings = load_embeddings(model, device)
    vectors: list[list[float]] = []
    batches = range(0, len(chunks), EMBED_BATCH)
    for start in tqdm(batches, desc="embedding", unit="batch", disable=not progress):
        vectors.extend(
            embeddings.embed_documents([c.content for c in chunks[start : start + EMBED_BATCH]])
        )
    return vectors


def open_stores(targets: Sequence[RetrieverEntry], config: PipelineConfig, base_dir: Path) -> None:
    """Open every embedded store (taking its process lock) and resume an interrupted BM25 save,
    before anything is written: a store in use elsewhere fails the ingest while all is intact."""
    for entry in targets:
        if isinstance(entry, QdrantEntry):
            settings = entry.backend_config
            shared_client(settings.connection_key(base_dir), settings.api_key)
        elif isinstance(entry, MilvusEntry):
            open_milvus_store(
                entry.backend_config,
                base_dir,
                config.embeddings.model,
                config.embeddings.device,
            )
        elif isinstance(entry, BM25Entry):
            recover_interrupted_save(resolve_path(entry.backend_config.index_path, base_dir))


def ingest_paths(
    paths: Iterable[str | Path],
    config: PipelineConfig,
    base_dir: Path,
    *,
    progress: bool = True,
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    extra_metadata: dict[str, Any] | None = None,
    store: str | None = None,
) -> IngestReport:
    """Ingest files or directories into every index the config names (bm25, qdrant, milvus,
    vectorstore), or only into the managed vector store ``store``."""
    targets: list[RetrieverEntry] = []
    if store is not None:
        targets = [
            VectorStoreEntry.model_validate(
                {
                    "name": "store",
                    "backend": "vectorstore",
                    "backend_config": {"vector_store_id": store, "root": store_root(config)},
                }
            )
        ]
    else:
        targets = writable_targets(config)
    if not targets:
        raise ConfigError("retrievers: no configured retriever has an index parallel-rag can write")
    files = discover_files(paths)
    if not files:
        raise DocumentLoadError("no .md, .txt or .jsonl files found in the given paths")
    chunks: list[Chunk] = []
    for path in tqdm(files, desc="reading", unit="file", disable=not progress):
        chunks.extend(
            load_chunks(
                path,
                chunk_size=chunk_size,
                chunk_overlap=chunk_overlap,
                extra_metadata=extra_metadata,
            )
        )
    file_ids = {file_id_for(path) for path in files}
    add_chunk_hashes(chunks, config.embeddings.model)
    report = IngestReport(files=[str(p) for p in files], chunks=len(chunks))

    open_stores(targets, config, base_dir)  # a store another process holds fails here, early
    fresh = by_file((c.id, c.metadata["file_id"], c.metadata["chunk_hash"]) for c in chunks)
    to_write = {
        position: changed_files(fresh, file_ids, stored_in(entry, config, base_dir, file_ids))
        for position, entry in enumerate(targets)
        if isinstance(entry, DENSE_TARGETS)
    }
    needed = set().union(*to_write.values())
    to_embed = [c for c in chunks if c.metadata["file_id"] in needed]
    vectors: dict[str, list[float]] = {}
    if to_embed:
        embedded = embed_chunks(
            to_embed, config.embeddings.model, config.embeddings.device, progress
        )
        vectors = {c.id: v for c, v in zip(to_embed, embedded, strict=True)}
    report.embedded = len(to_embed)
    for position, entry in enumerate(targets):
        label = f"vector store {store}" if store is not None else f"{entry.name} ({entry.backend})"
        report.indexes.append(label)
        if isinstance(entry, BM25Entry):
            if not replace_in_bm25(entry, base_dir, chunks, file_ids):
                report.unchanged.append(label)
            continue
        files_to_write = to_write[position]
        if not files_to_write:
            report.unchanged.append(label)
            continue
        written = [c for c in chunks if c.metadata["file_id"] in files_to_write]
        columns = {
            "ids": [c.id for c in written],
            "texts": [c.content for c in written],
            "metadatas": [c.metadata for c in written],
            "vectors": [vectors[c.id] for c in written],
            "replace_file_ids": sorted(files_to_write),
        }
        if isinstance(entry, QdrantEntry):
            write_chunks(entry.backend_config, base_dir, **columns)
        elif isinstance(entry, MilvusEntry):
            write_milvus_chunks(
                entry.backend_config,
                base_dir,
                embedding_model=config.embeddings.model,
                device=config.embeddings.device,
                **columns,
            )
        else:
            write_store_chunks(
                entry.backend_config.store_dir(base_dir),
                embedding_model=config.embeddings.model,
                **columns,
            )
    return report
