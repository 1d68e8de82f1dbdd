"""``bm25``: the lexical backend, an on-disk BM25 index (bm25s or rank-bm25 scoring the same
Lucene variant) and its retriever. Core: no extra needed.

``settings.py`` holds the ``backend_config`` model, ``retriever.py`` the retriever and
ingest's store writer, ``index.py`` the index (``BM25Index``) built from ``chunks.py`` (a
chunk's indexed text and term ids), scored by ``scoring.py`` (both engines, the Lucene variant),
selected by ``top_k.py``, saved in the format of ``storage.py``; ``updates.py`` the writes that
replace a file's chunks in a saved index; ``analysis.py`` the analyzers.

This package's ``BACKEND`` is what the registry imports: the settings model and hooks that
import ``retriever.py`` (and with it bm25s, numpy and rank-bm25) only when a configuration
builds a ``bm25`` branch or writes its store.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendContext, BackendSpec, BuildRequest
from parallel_rag.backends.bm25.settings import BM25Settings


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.bm25.retriever import build_retriever

    return build_retriever(request)


def store_writer(settings: BM25Settings, context: BackendContext) -> Any:
    from parallel_rag.backends.bm25.retriever import BM25Store

    return BM25Store(settings, context)


BACKEND = BackendSpec(
    name="bm25",
    settings=BM25Settings,
    factory=build_retriever,
    kind="lexical",
    threshold_refusal="BM25 scores are unbounded and not a similarity",
    store=store_writer,
    locations=lambda settings, base_dir: [settings.index_dir(base_dir)],
    evaluable=True,
    term_index=True,
)
