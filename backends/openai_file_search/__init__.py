"""``openai``: OpenAI vector-store file search, called directly over HTTP (dense). Core: no
extra needed (it speaks the REST API itself, without the ``openai`` package).

``settings.py`` holds the ``backend_config`` model and the attribute-filter check;
``retriever.py`` the search request, the result mapping and the retriever. This package's
``BACKEND`` is what the registry imports: the settings and a factory that imports
``retriever.py`` only when a configuration builds an ``openai`` branch.
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendSpec, BuildRequest
from parallel_rag.backends.openai_file_search.settings import OpenAIFileSearchSettings


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.openai_file_search.retriever import build_retriever

    return build_retriever(request)


BACKEND = BackendSpec(
    name="openai",
    settings=OpenAIFileSearchSettings,
    factory=build_retriever,
    kind="dense",
)
