"""Stage 5, write: which stores an ingest writes, which files of a batch each must write, and
the writes themselves (each backend's ``StoreWriter``: BM25, Qdrant, Qdrant Edge, Milvus,
managed vector stores, a hybrid's legs).

Re-ingesting unchanged files changes nothing: every chunk carries a ``chunk_hash``; a store
that already holds a file's chunks with the same ids and hashes is not written for that file,
and those chunks are not embedded again (a file half-written by a killed ingest has missing
points, so it counts as changed). A file is compared as a whole (a digest of its chunks' ids
and hashes, taken when it is chunked), so a file written in parts is compared before its first
part and written whole or not at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from parallel_rag.backends.base import BackendContext, ChunkBatch, Fingerprint, StoreWriter
from parallel_rag.backends.registry import BACKENDS, leaf_entries, named_store, store_writer
from parallel_rag.graph.components import backend_context
from parallel_rag.graph.configuration import (
    ENTRY_MODELS,
    ConfigError,
    PipelineConfig,
    RetrieverEntry,
)
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.studio.ingestion.chunk import Chunk
from parallel_rag.studio.ingestion.embed import EmbeddedChunks
from parallel_rag.studio.ingestion.spool import fingerprint_digest


def writable_targets(config: PipelineConfig) -> list[RetrieverEntry]:
    """Every store ingest can write (its backend registers a store writer), a hybrid's legs
    included, each once."""
    found = [e for e in leaf_entries(config.retrievers) if BACKENDS[e.backend].store is not None]
    unique: dict[str, RetrieverEntry] = {}
    for entry in found:
        unique.setdefault(f"{entry.backend}:{entry.backend_config.model_dump_json()}", entry)
    return list(unique.values())


def ingest_targets(config: PipelineConfig, store: str | None) -> list[RetrieverEntry]:
    """The stores an ingest writes: every writable configured one, or the named store ``store``
    alone (a managed vector store: ``registry.named_store``)."""
    if store is not None:
        backend, settings = named_store(store, config.retrievers)
        entry = {"name": "store", "backend": backend, "backend_config": settings}
        return [ENTRY_MODELS[backend].model_validate(entry)]
    targets = writable_targets(config)
    if not targets:
        raise ConfigError("retrievers: no configured retriever has an index parallel-rag can write")
    return targets


def ingest_context(config: PipelineConfig, base_dir: Path) -> BackendContext:
    """The context every store writer of ``config`` gets: the graph's, plus the generator's
    sentences (``GeneratorSentences``: its splitter, and the vectors the embed stage stored
    read first) for a store that indexes sentences."""
    stored = config.generator.sentence_vectors
    sentences = GeneratorSentences(
        config.embeddings.model,
        config.embeddings.device,
        base_dir / stored if stored is not None else None,
    )
    return replace(backend_context(base_dir, config.embeddings), sentences=sentences)


def writer_for(entry: RetrieverEntry, context: BackendContext) -> StoreWriter:
    writer = store_writer(entry.backend, entry.backend_config, context)  # type: ignore[attr-defined]
    assert writer is not None  # writable_targets keeps only backends with a store writer
    return writer


@dataclass
class Target:
    """A store ingest writes: its label in reports and timings, and its writer."""

    label: str
    writer: StoreWriter


def open_targets(
    entries: Sequence[RetrieverEntry], context: BackendContext, store: str | None
) -> list[Target]:
    """A writer for each store, every one opened before the first write: a store another
    process holds fails here, while every store is intact."""
    targets = [
        Target(
            f"vector store {store}" if store is not None else f"{entry.name} ({entry.backend})",
            writer_for(entry, context),
        )
        for entry in entries
    ]
    for target in targets:
        target.writer.open()
    return targets


def by_file(fingerprints: Iterable[Fingerprint]) -> dict[str, set[Fingerprint]]:
    grouped: dict[str, set[Fingerprint]] = defaultdict(set)
    for fingerprint in fingerprints:
        grouped[fingerprint[1]].add(fingerprint)
    return grouped


def changed_files(
    digests: Mapping[str, str], file_ids: Iterable[str], stored: set[Fingerprint] | None
) -> set[str]:
    """The files whose chunks in an index (``stored``) differ from their chunks now (ids or
    hashes: ``digests``, each whole file's ``fingerprint_digest``); all of them when nothing
    stored is usable (``stored`` is None)."""
    if stored is None:
        return set(file_ids)
    held = by_file(stored)
    return {f for f in file_ids if fingerprint_digest(held.get(f, ())) != digests[f]}


class FilePlan(NamedTuple):
    """The last file of a batch and which stores write it: what the next batch follows for
    that file if it goes on there."""

    file_id: str
    writes: tuple[bool, ...]


@dataclass
class BatchPlan:
    """Which files of a batch each store writes (``to_write``, one set per target), which of
    them go on from the previous batch (``carried``: added to, not replaced), and the chunks
    a dense store needs vectors for."""

    chunks: list[Chunk]
    to_write: list[set[str]]
    carried: FilePlan | None
    to_embed: list[Chunk]

    def last(self) -> FilePlan:
        """The plan the next batch follows if it goes on with this batch's last file."""
        last = self.chunks[-1].metadata["file_id"]
        return FilePlan(last, tuple(last in files for files in self.to_write))


def plan_batch(
    chunks: list[Chunk],
    digests: Mapping[str, str],
    going_on: FilePlan | None,
    targets: Sequence[Target],
) -> BatchPlan:
    """Ask every store what it holds of the batch's files and plan the writes. ``going_on`` is
    the previous batch's last file: when this batch starts with more of it, those chunks go to
    the stores that wrote its first part."""
    files = list(dict.fromkeys(c.metadata["file_id"] for c in chunks))
    carried = going_on if going_on is not None and going_on.file_id == files[0] else None
    starting = files[1:] if carried is not None else files
    to_write = [
        changed_files(digests, starting, t.writer.fingerprints(starting)) if starting else set()
        for t in targets
    ]
    if carried is not None:
        for files_to_write, writes in zip(to_write, carried.writes, strict=True):
            if writes:
                files_to_write.add(carried.file_id)
    dense = [files for t, files in zip(targets, to_write, strict=True) if t.writer.needs_vectors]
    needed = set().union(*dense)
    to_embed = [c for c in chunks if c.metadata["file_id"] in needed]
    return BatchPlan(chunks, to_write, carried, to_embed)


def chunk_batch(chunks: Sequence[Chunk], vectors: EmbeddedChunks | None) -> ChunkBatch:
    """The columns a store writes (``vectors`` for a store that needs them)."""
    return ChunkBatch(
        ids=[c.id for c in chunks],
        texts=[c.content for c in chunks],
        metadatas=[c.metadata for c in chunks],
        vectors=vectors.rows([c.id for c in chunks]) if vectors is not None else None,
    )


def write_target(
    target: Target, plan: BatchPlan, files_to_write: set[str], vectors: EmbeddedChunks
) -> None:
    """One store's share of a batch: the chunks of ``files_to_write``; the first part of a
    file replaces what the store held of it, the later ones (``plan.carried``) add to it."""
    kept = [c for c in plan.chunks if c.metadata["file_id"] in files_to_write]
    batch = chunk_batch(kept, vectors if target.writer.needs_vectors else None)
    added = {plan.carried.file_id} if plan.carried is not None else set()
    target.writer.write(batch, sorted(files_to_write - added))
