"""Qdrant dense retrieval through ``langchain-qdrant``: local mode on disk or in memory, or a
server URL. ``similarity_threshold`` becomes Qdrant's ``score_threshold`` (cosine similarity).

Local mode allows one process per path; clients are cached per process so every branch, request
and the ingester share one. A second process opening the same path gets ``StoreInUseError``
naming the path.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    ChunkBatch,
    DenseStoreRetriever,
    Fingerprint,
    MetadataFilter,
    SettingsStore,
    StoreInUseError,
    scored_document,
)
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.qdrant.settings import (
    DEFAULT_PATH,
    QdrantSettings,
)
from pydantic import Field, PrivateAttr, SecretStr

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "DEFAULT_PATH",
    "QdrantSettings",
]

if TYPE_CHECKING:  # imported where used: the "qdrant" extra, and 0.5 s, only when configured
    from qdrant_client import QdrantClient, models


log = logging.getLogger(__name__)

_clients: dict[tuple[str, str], QdrantClient] = {}
_client_locks: dict[tuple[str, str], threading.Lock] = {}
_registry_lock = threading.Lock()


def shared_client(key: tuple[str, str], api_key: SecretStr | None = None) -> QdrantClient:
    """One client per connection per process (local mode locks its path)."""
    from qdrant_client import QdrantClient

    with _registry_lock:
        if key not in _clients:
            kind, value = key
            if kind == "url":
                secret = api_key.get_secret_value() if api_key else None
                _clients[key] = QdrantClient(url=value, api_key=secret)
            elif kind == "location":
                _clients[key] = QdrantClient(location=value)
            else:
                Path(value).mkdir(parents=True, exist_ok=True)
                try:
                    _clients[key] = QdrantClient(path=value)
                except RuntimeError as error:
                    if "already accessed" not in str(error):
                        raise
                    raise StoreInUseError("Qdrant local storage", value, "Qdrant") from None
            _client_locks[key] = threading.Lock()
        return _clients[key]


def close_clients() -> None:
    """Close every shared client while the interpreter can still import: left to its
    ``__del__`` at shutdown, local mode's close fails and prints a traceback
    ("sys.meta_path is None") into the output of every process that used it."""
    with _registry_lock:
        clients = list(_clients.values())
        _clients.clear()
        _client_locks.clear()
    for client in clients:
        try:
            client.close()
        except Exception as error:  # noqa: BLE001 - a close at exit reports, never raises
            log.debug("closing a Qdrant client at exit failed: %s", error)


atexit.register(close_clients)


def client_lock(key: tuple[str, str]) -> threading.Lock:
    """Local mode is not thread-safe under concurrent writes; serialise its calls."""
    return _client_locks[key]


def qdrant_filter(filters: MetadataFilter | None, metadata_field: str) -> models.Filter | None:
    """Metadata equality filter in Qdrant's own filter language."""
    if not filters:
        return None
    from qdrant_client import models

    conditions = []
    for key, value in filters.items():
        field = f"{metadata_field}.{key}"
        if isinstance(value, float) and not value.is_integer():
            conditions.append(
                models.FieldCondition(key=field, range=models.Range(gte=value, lte=value))
            )
        else:
            conditions.append(
                models.FieldCondition(key=field, match=models.MatchValue(value=value))
            )
    return models.Filter(must=conditions)


class QdrantRetriever(DenseStoreRetriever):
    """Dense retriever over a Qdrant collection; usable alone in any LangChain chain."""

    settings: QdrantSettings = Field(default_factory=QdrantSettings)
    _store: Any = PrivateAttr(default=None)

    def _vector_store(self):
        if self._store is None:
            from langchain_qdrant import QdrantVectorStore
            from qdrant_client import models

            key = self.settings.connection_key(self.base_dir)
            client = shared_client(key, self.settings.api_key)
            if not client.collection_exists(self.settings.collection):
                raise LookupError(
                    f"Qdrant collection '{self.settings.collection}' does not exist at {key[1]}; "
                    "run `parallel-rag ingest PATH...` first"
                )
            self._store = QdrantVectorStore(
                client=client,
                collection_name=self.settings.collection,
                embedding=load_embeddings(self.embedding_model, self.device),
                content_payload_key=self.settings.content_field,
                metadata_payload_key=self.settings.metadata_field,
                distance=models.Distance.COSINE,
            )
        return self._store

    def warm_up(self) -> None:
        """Open the client now: local mode reads every point of the collection into memory
        (see ``SearchKwargsRetriever.warm_up``)."""
        self._vector_store()

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        store = self._vector_store()
        vector = store.embeddings.embed_query(query)
        with client_lock(self.settings.connection_key(self.base_dir)):
            results = store.similarity_search_with_score_by_vector(
                vector,
                k=k or self.k,
                filter=qdrant_filter(filters, self.settings.metadata_field),
                score_threshold=self.score_threshold,
            )
        return [self._to_document(doc, score) for doc, score in results]

    @staticmethod
    def _to_document(doc: Document, score: float) -> Document:
        metadata = dict(doc.metadata)
        point_id = str(metadata.pop("_id", ""))
        metadata.pop("_collection_name", None)
        return scored_document(point_id, doc.page_content, metadata, score)


def files_filter(settings: QdrantSettings, file_ids: Sequence[str]) -> models.Filter:
    """The points whose metadata names one of ``file_ids``."""
    from qdrant_client import models

    return models.Filter(
        must=[
            models.FieldCondition(
                key=f"{settings.metadata_field}.file_id",
                match=models.MatchAny(any=list(file_ids)),
            )
        ]
    )


def stored_fingerprints(
    settings: QdrantSettings, base_dir: Path | None, file_ids: Sequence[str]
) -> set[tuple[str, str, str | None]]:
    """(chunk id, file id, ``chunk_hash``) of every point the files have in the collection:
    what ingest compares with fresh chunks to leave unchanged files alone."""
    key = settings.connection_key(base_dir)
    client = shared_client(key, settings.api_key)
    found: set[tuple[str, str, str | None]] = set()
    with client_lock(key):
        if not file_ids or not client.collection_exists(settings.collection):
            return found
        selector = files_filter(settings, file_ids)
        offset = None
        while True:
            points, offset = client.scroll(
                settings.collection,
                scroll_filter=selector,
                limit=1024,
                offset=offset,
                with_payload=[settings.metadata_field],
                with_vectors=False,
            )
            for point in points:
                metadata = (point.payload or {}).get(settings.metadata_field) or {}
                found.add((str(point.id), metadata.get("file_id"), metadata.get("chunk_hash")))
            if offset is None:
                return found


def write_chunks(
    settings: QdrantSettings,
    base_dir: Path | None,
    *,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]],
    replace_file_ids: Sequence[str],
    batch_size: int = 256,
) -> None:
    """Replace every point of ``replace_file_ids`` with the given chunks (ids are UUID strings)."""
    from qdrant_client import models

    key = settings.connection_key(base_dir)
    client = shared_client(key, settings.api_key)
    with client_lock(key):
        if not client.collection_exists(settings.collection):
            dimension = len(vectors[0]) if len(vectors) else len(load_embeddings().embed_query("x"))
            client.create_collection(
                settings.collection,
                vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
            )
        if replace_file_ids:
            client.delete(
                settings.collection,
                points_selector=models.FilterSelector(
                    filter=files_filter(settings, replace_file_ids)
                ),
            )
        for start in range(0, len(ids), batch_size):
            points = [
                models.PointStruct(
                    id=ids[i],
                    vector=[float(x) for x in vectors[i]],
                    payload={
                        settings.content_field: texts[i],
                        settings.metadata_field: metadatas[i],
                    },
                )
                for i in range(start, min(start + batch_size, len(ids)))
            ]
            client.upsert(settings.collection, points=points)


class QdrantStore(SettingsStore):
    """Ingest's writer for a Qdrant collection."""

    def open(self) -> None:
        shared_client(self.settings.connection_key(self.context.base_dir), self.settings.api_key)

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint]:
        return stored_fingerprints(self.settings, self.context.base_dir, file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        write_chunks(
            self.settings,
            self.context.base_dir,
            **batch.columns(),
            replace_file_ids=replace_file_ids,
        )
