"""``vectorstore``: the project's own managed vector stores, on disk, by name.

``parallel-rag ingest --store NAME PATH...`` creates or updates the store ``NAME`` (chunks,
normalised embeddings, metadata and the file ids they came from); ``vector_store_id: NAME``
selects it and ``file_ids`` restricts a search to some of its files. Search is exact cosine
similarity (``similarity_threshold`` applies), ties kept in store order. Kind: **dense**.

Layout under ``root`` (default ``.parallel-rag/vector_stores``)::

    NAME/CURRENT             the live revision's directory name (replaced atomically)
    NAME/<revision>/manifest.json   id, embedding identity, dimension, files, counts, times
    NAME/<revision>/chunks.jsonl    one {"id", "content", "metadata"} per chunk
    NAME/<revision>/vectors.npy     float32 [chunks x dimension], unit length

A write publishes a complete new revision beside the live one, then replaces ``CURRENT``
(both through ``atomic_files``), so readers never see a half-written store; writers take a file
lock. A store remembers its embedding model and
refuses queries embedded by another one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    ChunkBatch,
    DenseStoreRetriever,
    Fingerprint,
    MetadataFilter,
    SettingsStore,
    matches_filter,
    scored_document,
)
from parallel_rag.backends.encoders.embeddings import BUNDLED, embedding_identity, load_embeddings
from parallel_rag.backends.shared.revisions import (
    LiveRevisions,
    current_revision,
    new_revision,
    publish,
    write_lock,
)
from parallel_rag.backends.vectorstore.settings import (
    DEFAULT_ROOT,
    STORE_ID,
    VectorStoreSettings,
    named_store,
    store_path,
)

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "DEFAULT_ROOT",
    "STORE_ID",
    "VectorStoreSettings",
    "store_path",
    "named_store",
]

FORMAT_VERSION = 1


@dataclass
class ManagedVectorStore:
    """One revision of a store, loaded into memory."""

    directory: Path
    revision: str
    manifest: dict[str, Any]
    ids: list[str]
    contents: list[str]
    metadatas: list[dict[str, Any]]
    vectors: np.ndarray

    @classmethod
    def load(cls, directory: Path, revision: str) -> ManagedVectorStore:
        folder = directory / revision
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        ids, contents, metadatas = [], [], []
        with open(folder / "chunks.jsonl", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    ids.append(record["id"])
                    contents.append(record["content"])
                    metadatas.append(record["metadata"])
        vectors = np.load(folder / "vectors.npy")
        if vectors.shape[0] != len(ids):
            raise ValueError(
                f"vector store {directory.name}: {len(ids)} chunks but {len(vectors)} vectors"
            )
        return cls(directory, revision, manifest, ids, contents, metadatas, vectors)

    def search(
        self,
        vector: Sequence[float],
        k: int,
        *,
        filters: MetadataFilter | None = None,
        file_ids: Sequence[str] = (),
        threshold: float | None = None,
    ) -> list[tuple[int, float]]:
        """(position, cosine similarity) of the best ``k`` chunks passing the filters."""
        if not self.ids:
            return []
        query = np.asarray(vector, dtype=np.float32)
        if query.shape[0] != self.vectors.shape[1]:
            raise ValueError(
                f"query has dimension {query.shape[0]}, store has {self.vectors.shape[1]}"
            )
        norm = float(np.linalg.norm(query))
        scores = self.vectors @ (query / norm if norm else query)
        allowed = set(file_ids)
        mask = np.array(
            [
                matches_filter(meta, filters) and (not allowed or meta.get("file_id") in allowed)
                for meta in self.metadatas
            ]
        )
        if threshold is not None:
            mask &= scores >= threshold
        candidates = np.flatnonzero(mask)
        order = candidates[np.argsort(-scores[candidates], kind="stable")][:k]
        return [(int(i), float(scores[i])) for i in order]


_cache: LiveRevisions[ManagedVectorStore] = LiveRevisions(
    lambda directory, revision: ManagedVectorStore.load(directory, revision),
    lambda directory: (
        f"vector store '{directory.name}' does not exist under {directory.parent}; "
        f"run `parallel-rag ingest --store {directory.name} PATH...` first"
    ),
)


def open_store(directory: Path) -> ManagedVectorStore:
    """The live revision of a store (cached until ``CURRENT`` changes)."""
    return _cache.get(directory)


def stored_fingerprints(
    directory: Path, file_ids: Sequence[str]
) -> set[tuple[str, str, str | None]]:
    """(chunk id, file id, ``chunk_hash``) of every chunk the files have in the store's live
    revision: what ingest compares with fresh chunks to leave unchanged files alone."""
    if not current_revision(directory):
        return set()
    store = open_store(directory)
    wanted = set(file_ids)
    return {
        (chunk_id, meta.get("file_id"), meta.get("chunk_hash"))
        for chunk_id, meta in zip(store.ids, store.metadatas, strict=True)
        if meta.get("file_id") in wanted
    }


def write_chunks(
    directory: Path,
    *,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]],
    replace_file_ids: Sequence[str],
    embedding_model: str = BUNDLED,
) -> dict[str, Any]:
    """Create or update a store: the files' old chunks are replaced by the given ones."""
    identity = embedding_identity(embedding_model)
    with write_lock(directory):
        old = open_store(directory) if current_revision(directory) else None
        if old is not None and old.manifest.get("embedding") != identity:
            raise ValueError(
                f"vector store '{directory.name}' holds {old.manifest.get('embedding')} "
                f"embeddings; refusing to add {identity} ones"
            )
        replaced = set(replace_file_ids)
        keep = (
            []
            if old is None
            else [i for i, meta in enumerate(old.metadatas) if meta.get("file_id") not in replaced]
        )
        new_vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1 if ids else 0)
        norms = np.linalg.norm(new_vectors, axis=1, keepdims=True)
        new_vectors = new_vectors / np.where(norms == 0, 1, norms)
        if old is not None and keep and ids and new_vectors.shape[1] != old.vectors.shape[1]:
            raise ValueError(f"vector store '{directory.name}': embedding dimension changed")
        kept_ids = [old.ids[i] for i in keep] if old else []
        kept_texts = [old.contents[i] for i in keep] if old else []
        kept_meta = [old.metadatas[i] for i in keep] if old else []
        all_ids = kept_ids + list(ids)
        all_texts = kept_texts + list(texts)
        all_meta = kept_meta + [dict(m) for m in metadatas]
        parts = [old.vectors[keep]] if old is not None and keep else []
        if len(ids):
            parts.append(new_vectors)
        dimension = int(parts[0].shape[1]) if parts else 0
        matrix = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        files: dict[str, dict[str, Any]] = {}
        for meta in all_meta:
            entry = files.setdefault(
                str(meta.get("file_id")), {"source": meta.get("source"), "chunks": 0}
            )
            entry["chunks"] += 1
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        revision = new_revision()
        manifest = {
            "format": FORMAT_VERSION,
            "id": directory.name,
            "revision": revision,
            "embedding": identity,
            "dimension": dimension,
            "chunks": len(all_ids),
            "files": files,
            "created_at": old.manifest.get("created_at", now) if old else now,
            "updated_at": now,
        }

        def fill(folder: Path) -> None:
            with open(folder / "chunks.jsonl", "w", encoding="utf-8") as handle:
                for chunk_id, text, meta in zip(all_ids, all_texts, all_meta, strict=True):
                    record = {"id": chunk_id, "content": text, "metadata": meta}
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            np.save(folder / "vectors.npy", matrix.astype(np.float32))
            (folder / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")

        # the previous revision stays for readers still loading it
        publish(directory, revision, fill, previous=old.revision if old else None)
        return manifest


class VectorStoreRetriever(DenseStoreRetriever):
    """Dense retriever over a managed store; usable alone in any LangChain chain."""

    reads_revisions: ClassVar[bool] = True  # held for a graph run: revisions.py

    settings: VectorStoreSettings

    def warm_up(self) -> None:
        """Read the live revision into memory now (see ``SearchKwargsRetriever.warm_up``)."""
        open_store(self.settings.store_dir(self.base_dir))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        store = open_store(self.settings.store_dir(self.base_dir))
        self.check_built_with(
            store.manifest.get("embedding"), f"vector store '{self.settings.vector_store_id}'"
        )
        vector = load_embeddings(self.embedding_model, self.device).embed_query(query)
        hits = store.search(
            vector,
            k or self.k,
            filters=filters,
            file_ids=self.settings.file_ids,
            threshold=self.score_threshold,
        )
        return [
            scored_document(store.ids[i], store.contents[i], store.metadatas[i], score)
            for i, score in hits
        ]


class ManagedStore(SettingsStore):
    """Ingest's writer for a managed vector store."""

    def open(self) -> None:
        """Nothing to take ahead: a write holds the store's file lock while it runs."""

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint]:
        return stored_fingerprints(self.settings.store_dir(self.context.base_dir), file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        write_chunks(
            self.settings.store_dir(self.context.base_dir),
            **batch.columns(),
            replace_file_ids=replace_file_ids,
            embedding_model=self.context.embedding_model,
        )
