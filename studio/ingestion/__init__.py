"""``ingest``: files (or LangChain ``Document``s) into every configured store ingest can write
(each backend that registers a ``StoreWriter``: BM25, Qdrant, Qdrant Edge, Milvus and managed
vector stores, a ``hybrid``'s legs included), replacing earlier chunks of the same files;
``store=NAME`` (``parallel-rag ingest --store NAME``) writes the managed vector store ``NAME``
only, creating it if needed.

A pipeline of stages, each a module with typed input and output, so each can be read, tested
and timed on its own:

``load``      paths -> ``SourceFile``s (the supported files, each with its stable id)
``convert``   ``SourceFile`` -> ``ConvertedFile`` (records of segments: pages, slides, bodies)
``chunk``     ``ConvertedFile`` -> ``Chunk``s (ids, metadata, ``chunk_hash``; sizes from
              ``defaults``, the one place they are written)
``embed``     ``Chunk``s -> ``EmbeddedChunks`` (one float32 row each) and the generator's
              sentence vectors
``write``     chunks and vectors -> each store's ``StoreWriter``, skipping unchanged files

``pipeline`` runs them with progress bars (``spool`` keeps the chunks between the two passes)
and records each stage's wall and CPU time (``timings``), which ``parallel-rag ingest
--timings`` prints and ``--json`` returns.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CHUNK_OVERLAP": "defaults",
    "CHUNK_SIZE": "defaults",
    "Chunk": "chunk",
    "load_chunks": "chunk",
    "embed_chunks": "embed",
    "IngestReport": "pipeline",
    "ingest_documents": "pipeline",
    "ingest_paths": "pipeline",
    "StageTimings": "timings",
    "ingest_targets": "write",
    "writable_targets": "write",
    "writer_for": "write",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """The stages' public names, each imported when first used: reading ``defaults`` (the CLI
    does, to build its parser) loads no encoder, store or converter."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
