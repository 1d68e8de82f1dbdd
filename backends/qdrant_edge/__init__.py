"""``qdrant_edge``: Qdrant's own engine in-process (``qdrant-edge-py``), an HNSW index on disk
with payload filters and no server; the embedded dense store. Core: no extra needed.

``settings.py`` holds the ``backend_config`` model; ``retriever.py`` the retriever and ingest's
store writer; ``search.py``, ``writes.py`` and ``points.py`` the searches, the revisioned
writes and the points (passages, sentences) they are made of. This package's ``BACKEND`` is
what the registry imports: the settings and hooks that import ``retriever.py`` (and with it
Qdrant Edge's bindings and numpy) only when a configuration builds a ``qdrant_edge`` branch or
writes its store.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendContext, BackendSpec, BuildRequest, settings_factory
from parallel_rag.backends.qdrant_edge.settings import QdrantEdgeSettings
from parallel_rag.backends.shared.revisions import current_file_of


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeRetriever

    return settings_factory(QdrantEdgeRetriever)(request)


def store_writer(settings: QdrantEdgeSettings, context: BackendContext) -> Any:
    from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeStore

    return QdrantEdgeStore(settings, context)


BACKEND = BackendSpec(
    name="qdrant_edge",
    settings=QdrantEdgeSettings,
    factory=build_retriever,
    kind="dense",
    store=store_writer,
    locations=current_file_of,
    evaluable=True,
)
