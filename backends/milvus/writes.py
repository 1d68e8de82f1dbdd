"""Ingest's writes to a Milvus collection: what the files already have there
(``stored_fingerprints``), their entities replaced by new chunks (``write_chunks``), and the
store writer ingest drives (``MilvusStore``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from parallel_rag.backends.base import ChunkBatch, Fingerprint, SettingsStore
from parallel_rag.backends.encoders.embeddings import BUNDLED
from parallel_rag.backends.milvus.expressions import milvus_field, milvus_literal
from parallel_rag.backends.milvus.outages import call_loaded
from parallel_rag.backends.milvus.settings import MilvusSettings
from parallel_rag.backends.milvus.stores import lock_for, open_store

DELETE_BATCH = 64


def files_expressions(settings: MilvusSettings, file_ids: Sequence[str]) -> Iterator[str]:
    """Expressions selecting the entities of ``file_ids``, ``DELETE_BATCH`` files at a time."""
    field = milvus_field("file_id", settings.metadata_field)
    for start in range(0, len(file_ids), DELETE_BATCH):
        batch = file_ids[start : start + DELETE_BATCH]
        yield " or ".join(f"{field} == {milvus_literal(f)}" for f in batch)


def stored_fingerprints(
    settings: MilvusSettings,
    base_dir: Path | None,
    file_ids: Sequence[str],
    *,
    embedding_model: str = BUNDLED,
    device: str = "cpu",
) -> set[tuple[str, str, str | None]]:
    """(chunk id, file id, ``chunk_hash``) of every entity the files have in the collection:
    what ingest compares with fresh chunks to leave unchanged files alone."""
    store = open_store(settings, base_dir, embedding_model, device)
    uri = settings.resolved_uri(base_dir)
    found: set[tuple[str, str, str | None]] = set()
    with lock_for(uri):
        client = store.client
        if not file_ids or not client.has_collection(settings.collection):
            return found
        wanted = [settings.metadata_field] if settings.metadata_field else ["file_id", "chunk_hash"]
        for expression in files_expressions(settings, file_ids):
            rows = call_loaded(
                client,
                settings.collection,
                settings.uri if settings.is_server else uri,
                lambda expression=expression: client.query(
                    settings.collection,
                    filter=expression,
                    output_fields=[settings.primary_field, *wanted],
                ),
            )
            for row in rows:
                metadata = (
                    (row.get(settings.metadata_field) or {}) if settings.metadata_field else row
                )
                found.add(
                    (
                        str(row[settings.primary_field]),
                        metadata.get("file_id"),
                        metadata.get("chunk_hash"),
                    )
                )
    return found


def write_chunks(
    settings: MilvusSettings,
    base_dir: Path | None,
    *,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]] | None,
    replace_file_ids: Sequence[str],
    embedding_model: str = BUNDLED,
    device: str = "cpu",
    batch_size: int = 256,
) -> None:
    """Replace every entity of ``replace_file_ids`` with the given chunks, then flush. A
    full-text collection takes no vectors: the engine's BM25 function analyzes the text."""
    store = open_store(settings, base_dir, embedding_model, device)
    uri = settings.resolved_uri(base_dir)
    with lock_for(uri):
        client = store.client
        if client.has_collection(settings.collection) and replace_file_ids:
            for expression in files_expressions(settings, replace_file_ids):
                client.delete(settings.collection, filter=expression)
        for start in range(0, len(ids), batch_size):
            end = min(start + batch_size, len(ids))
            store.add_embeddings(
                texts=list(texts[start:end]),
                embeddings=[]
                if vectors is None
                else [[float(x) for x in v] for v in vectors[start:end]],
                metadatas=[dict(m) for m in metadatas[start:end]],
                ids=list(ids[start:end]),
            )
        if client.has_collection(settings.collection):
            client.flush(settings.collection)


class MilvusStore(SettingsStore):
    """Ingest's writer for a Milvus collection."""

    @property
    def needs_vectors(self) -> bool:  # type: ignore[override]
        return not self.settings.full_text

    def open(self) -> None:
        c = self.context
        open_store(self.settings, c.base_dir, c.embedding_model, c.device)

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint]:
        c = self.context
        return stored_fingerprints(
            self.settings, c.base_dir, file_ids, embedding_model=c.embedding_model, device=c.device
        )

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        c = self.context
        write_chunks(
            self.settings,
            c.base_dir,
            **batch.columns(),
            replace_file_ids=replace_file_ids,
            embedding_model=c.embedding_model,
            device=c.device,
        )
