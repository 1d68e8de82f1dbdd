"""``hybrid``: a primary backend with an optional fallback, each a full retriever entry of
another backend (sequential or parallel). Core: no extra needed; its legs need theirs.

``settings.py`` holds its own setting (the strategy; the configuration adds the legs);
``retriever.py`` the retriever that runs the legs. This package's ``BACKEND`` is what the
registry imports: the settings and a factory that imports ``retriever.py`` only when a
configuration builds a ``hybrid`` branch (its legs are built through the registry, each by its
own backend's factory).
"""

from __future__ import annotations

from typing import Any

from parallel_rag.backends.base import BackendSpec, BuildRequest
from parallel_rag.backends.hybrid.settings import HybridOptions


def build_retriever(request: BuildRequest) -> Any:
    from parallel_rag.backends.hybrid.retriever import build_hybrid

    return build_hybrid(request)


BACKEND = BackendSpec(
    name="hybrid",
    settings=HybridOptions,
    factory=build_retriever,
    kind=lambda settings: settings.primary.retrieval_kind,
    legs={"primary": True, "fallback": False},
    summary=lambda settings: {
        "primary": settings.primary.name,
        "fallback": settings.fallback.name if settings.fallback else None,
        "strategy": settings.strategy,
    },
)
