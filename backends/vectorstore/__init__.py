"""``vectorstore``: the project's own managed vector stores on disk, by name (exact cosine
search, dense). Core: no extra needed.

``settings.py`` holds the ``backend_config`` model and where a named store lives;
``retriever.py`` the store's revisions, the retriever and ingest's store writer. This package's
``BACKEND`` is what the registry imports: the settings and hooks that import ``retriever.py``
(and with it numpy) only when a configuration builds a ``vectorstore`` branch or ingest writes
a store.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendContext, BackendSpec, BuildRequest, settings_factory
from parallel_rag.backends.shared.revisions import current_file_of
from parallel_rag.backends.vectorstore.settings import VectorStoreSettings, named_store


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.vectorstore.retriever import VectorStoreRetriever

    return settings_factory(VectorStoreRetriever)(request)


def store_writer(settings: VectorStoreSettings, context: BackendContext) -> Any:
    from parallel_rag.backends.vectorstore.retriever import ManagedStore

    return ManagedStore(settings, context)


BACKEND = BackendSpec(
    name="vectorstore",
    settings=VectorStoreSettings,
    factory=build_retriever,
    kind="dense",
    store=store_writer,
    locations=current_file_of,
    named_store=named_store,
)
