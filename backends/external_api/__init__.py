"""``external_api``: a search service over HTTP (Pinecone, Weaviate, Elasticsearch, or a custom
JSON request template), lexical or dense as its format says. Core: no extra needed.

``settings.py`` holds the ``backend_config`` model and the template checks; ``retriever.py``
the requests, the response mapping and the retriever. This package's ``BACKEND`` is what the
registry imports: the settings and a factory that imports ``retriever.py`` only when a
configuration builds an ``external_api`` branch.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendSpec, BuildRequest, settings_factory
from parallel_rag.backends.external_api.settings import ExternalAPISettings, threshold_refusal


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.external_api.retriever import ExternalAPIRetriever

    return settings_factory(ExternalAPIRetriever)(request)


BACKEND = BackendSpec(
    name="external_api",
    settings=ExternalAPISettings,
    factory=build_retriever,
    kind=lambda settings: settings.kind,
    threshold_refusal=threshold_refusal,
)
