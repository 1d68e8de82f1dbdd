"""``qdrant``: dense retrieval through ``langchain-qdrant``, Qdrant's local mode on disk or in
memory, or a server. Needs the ``qdrant`` extra (``pip install 'parallel-rag[qdrant]'``).

``settings.py`` holds the ``backend_config`` model; ``retriever.py`` the shared clients, the
retriever and ingest's store writer. This package's ``BACKEND`` is what the registry imports:
the settings and hooks that import ``retriever.py`` (and, where it opens a client,
qdrant-client) only when a configuration builds a ``qdrant`` branch or writes its collection.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import (
    BackendContext,
    BackendSpec,
    BuildRequest,
    resolve_path,
    settings_factory,
)
from parallel_rag.backends.qdrant.settings import QdrantSettings


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.qdrant.retriever import QdrantRetriever

    return settings_factory(QdrantRetriever)(request)


def store_writer(settings: QdrantSettings, context: BackendContext) -> Any:
    from parallel_rag.backends.qdrant.retriever import QdrantStore

    return QdrantStore(settings, context)


BACKEND = BackendSpec(
    name="qdrant",
    settings=QdrantSettings,
    factory=build_retriever,
    kind="dense",
    store=store_writer,
    # local mode keeps a collection's points in this folder; a server's expire by TTL only
    locations=lambda settings, base_dir: (
        [resolve_path(settings.path, base_dir) / "collection" / settings.collection]
        if settings.path
        else []
    ),
    evaluable=True,
    extra="qdrant",
)
