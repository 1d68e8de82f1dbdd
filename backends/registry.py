"""Every retrieval backend parallel-rag can build, one line each.

A backend is a module that defines its retriever, its settings model and a ``BACKEND =
BackendSpec(...)`` entry beside them (see ``base.BackendSpec``); adding one is that module plus
its name in ``MODULES`` below (docs/adding-a-backend.md walks through one). The configuration
schema (each backend's entry model and the unions ``retrievers:`` and a hybrid's legs accept),
the factory dispatch from an entry to its retriever, and the stores ``parallel-rag ingest``
writes are all derived from ``BACKENDS``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from parallel_rag.backends.base import BackendContext, BackendSpec, StoreWriter

MODULES = (
    "bm25",
    "qdrant",
    "qdrant_edge",
    "milvus",
    "external_api",
    "openai_file_search",
    "vectorstore",
    "hybrid",
    "mcp",
)
"""The backend modules under ``parallel_rag.backends``, each defining ``BACKEND``."""

BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (import_module(f"parallel_rag.backends.{module}").BACKEND for module in MODULES)
}
"""Every registered backend by its ``backend:`` name."""

REFUSED: dict[str, str] = {}
"""Backend names a configuration may spell but that are refused at load time, with why."""


def store_writer(backend: str, settings: Any, context: BackendContext) -> StoreWriter | None:
    """Ingest's writer for a backend's store, or None when ingest cannot write it."""
    spec = BACKENDS[backend]
    return None if spec.store is None else spec.store(settings, context)
