"""``milvus``: a Milvus Lite file or a Milvus server through ``langchain-milvus``, dense or
lexical (BM25 inside the engine). Needs the ``milvus`` extra (``pip install
'parallel-rag[milvus]'``).

``settings.py`` holds the ``backend_config`` model; ``retriever.py`` the retrievers,
``stores.py`` the shared stores (one per collection and process), ``writes.py`` ingest's writes
and store writer; ``expressions.py`` the filter expressions and ``outages.py`` what a server
restart needs. This package's ``BACKEND`` is what the registry imports: the settings and hooks
that import ``retriever.py`` or ``writes.py`` (and with them langchain-milvus and pymilvus) only
when a configuration builds a ``milvus`` branch or writes its collection.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendContext, BackendSpec, BuildRequest, resolve_path
from parallel_rag.backends.milvus.settings import MilvusSettings, threshold_refusal


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.milvus.retriever import build_milvus_retriever

    return build_milvus_retriever(request)


def store_writer(settings: MilvusSettings, context: BackendContext) -> Any:
    from parallel_rag.backends.milvus.writes import MilvusStore

    return MilvusStore(settings, context)


BACKEND = BackendSpec(
    name="milvus",
    settings=MilvusSettings,
    factory=build_retriever,
    kind=lambda settings: "lexical" if settings.full_text else "dense",
    threshold_refusal=threshold_refusal,
    store=store_writer,
    # Milvus Lite's database file; a server's data expires by TTL only
    locations=lambda settings, base_dir: (
        [] if "://" in settings.uri else [resolve_path(settings.uri, base_dir)]
    ),
    extra="milvus",
)
