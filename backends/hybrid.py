"""``hybrid``: a primary backend with an optional fallback backend.

``strategy: sequential`` (default) runs the fallback only after the primary failed or returned
nothing. ``strategy: parallel`` starts both at once and uses the primary's documents as soon as
it has any; the fallback's are used only when the primary failed or was empty. The two results
are never merged or ranked against each other.

In the graph the fallback is a node of its own (``retrieve -> fallback``), so Studio draws the
path and the branch record says which backend served and why the fallback ran; this retriever
is the same composition for use outside the graph (any LCEL chain). A hybrid is dense when its
primary is.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.base import (
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    matches_filter,
    retrieval_kind_of,
    supports_search_kwargs,
)
from pydantic import BaseModel, ConfigDict, Field

HybridStrategy = Literal["sequential", "parallel"]
_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="parallel-rag-hybrid")


class HybridOptions(BaseModel):
    """The hybrid's own setting; ``graph/configuration.py`` adds ``primary``/``fallback``
    (each a full backend entry) on top of it."""

    model_config = ConfigDict(extra="forbid")

    strategy: HybridStrategy = "sequential"


def fallback_reason(error: str | None) -> str:
    """Why the fallback ran, for the branch record."""
    return f"primary failed: {error}" if error else "primary returned no results"


@dataclass
class HybridOutcome:
    """What a hybrid lookup returned and who served it."""

    documents: list[Document]
    served_by: str
    fallback_used: bool
    fallback_reason: str | None
    error: str | None = None


def call_retriever(
    retriever: BaseRetriever, query: str, k: int | None, filters: MetadataFilter | None
) -> list[Document]:
    """One lookup with per-call ``k``/``filters`` (post-filtered for foreign retrievers)."""
    if supports_search_kwargs(retriever):
        return retriever.invoke(query, k=k, filters=filters or None)
    docs = [d for d in retriever.invoke(query) if matches_filter(d.metadata, filters)]
    return docs[:k] if k else docs


class HybridRetriever(SearchKwargsRetriever):
    """Primary retriever with an optional fallback; usable alone in any LangChain chain."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    primary: BaseRetriever
    fallback: BaseRetriever | None = None
    primary_name: str = "primary"
    fallback_name: str = "fallback"
    strategy: HybridStrategy = "sequential"
    primary_timeout_seconds: float = Field(default=30.0, gt=0)
    fallback_timeout_seconds: float = Field(default=30.0, gt=0)

    @property
    def retrieval_kind(self) -> RetrievalKind:
        return retrieval_kind_of(self.primary)

    def search(
        self, query: str, *, k: int | None = None, filters: MetadataFilter | None = None
    ) -> HybridOutcome:
        """Run the strategy; say who served and why the fallback ran."""
        fallback_future = None
        if self.fallback is not None and self.strategy == "parallel":
            fallback_future = _POOL.submit(call_retriever, self.fallback, query, k, filters)
        primary_future = _POOL.submit(call_retriever, self.primary, query, k, filters)
        docs, error = _wait(primary_future, self.primary_timeout_seconds)
        if docs:
            if fallback_future is not None:
                fallback_future.cancel()
            return HybridOutcome(docs, self.primary_name, False, None)
        if self.fallback is None:
            return HybridOutcome([], self.primary_name, False, None, error)
        reason = fallback_reason(error)
        if fallback_future is None:
            fallback_future = _POOL.submit(call_retriever, self.fallback, query, k, filters)
        fallback_docs, fallback_error = _wait(fallback_future, self.fallback_timeout_seconds)
        combined = None
        if fallback_error is not None:
            combined = f"{reason}; fallback '{self.fallback_name}' failed: {fallback_error}"
        return HybridOutcome(fallback_docs or [], self.fallback_name, True, reason, combined)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        outcome = self.search(query, k=k, filters=filters)
        if outcome.error is not None and not outcome.documents:
            raise RuntimeError(outcome.error)
        return outcome.documents


def _wait(future: Any, timeout: float) -> tuple[list[Document] | None, str | None]:
    try:
        return list(future.result(timeout=timeout)), None
    except FutureTimeout:
        future.cancel()
        return None, f"timed out after {timeout:g}s"
    except Exception as error:  # noqa: BLE001 - every backend failure leads to the fallback
        text = " ".join(str(error).split())
        return None, f"{type(error).__name__}: {text}"[:500] if text else type(error).__name__
