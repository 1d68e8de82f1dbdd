"""``hybrid``: a primary backend with an optional fallback backend, "primary, then fallback"
that the graph shares (``lookups.FallbackRetriever``).

``strategy: sequential`` (default) runs the fallback only after the primary failed or returned
nothing. ``strategy: parallel`` starts both at once and uses the primary's documents as soon as
it has any; the fallback's are used only when the primary failed or was empty. The two results
are never merged or ranked against each other.

The strategy comes in two legs, ``HybridRetriever.run_primary`` and ``run_fallback``, so the
graph can run the second leg in a node of its own (``retrieve -> fallback``): Studio draws the
path and the branch record says which backend served and why the fallback ran.
``HybridRetriever.search`` runs both legs back to back, for use outside the graph (any LCEL
chain). Each leg is a lookup under its own timeout (``lookups.start_lookup``). A hybrid is
dense when its primary is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from parallel_rag.backends.base import (
    BuildRequest,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    query_embedding,
    retrieval_kind_of,
    warm_up_each,
)
from parallel_rag.backends.hybrid.settings import (
    HybridOptions,
    HybridStrategy,
)
from parallel_rag.backends.shared.lookups import (
    Lookup,
    LookupCall,
    fallback_reason,
    lookup,
    start_lookup,
)
from pydantic import ConfigDict, Field

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "HybridStrategy",
    "HybridOptions",
]

T = TypeVar("T")


@dataclass
class HybridOutcome:
    """What a hybrid lookup returned and who served it."""

    documents: list[Document]
    served_by: str
    fallback_used: bool
    fallback_reason: str | None
    error: str | None = None


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

    def query_embedding(self) -> tuple[str, str] | None:
        """The primary's: the fallback may never run."""
        return query_embedding(self.primary)

    def legs(self) -> dict[str, BaseRetriever]:
        """The retrievers this one runs, by leg (the fallback when there is one): a graph run
        takes, at its start, the revision of each leg that reads one
        (``revisions.hold_stores_for_run``), as it does of its own branches."""
        legs = {"primary": self.primary}
        if self.fallback is not None:
            legs["fallback"] = self.fallback
        return legs

    def warm_up(self) -> None:
        """Open both legs now (see ``SearchKwargsRetriever.warm_up``); a leg that cannot be
        opened does not keep the other closed, and the first error is raised after both."""
        failed = warm_up_each(list(self.legs().items()))
        if failed:
            raise next(iter(failed.values()))

    def run_primary(self, call: LookupCall[T]) -> tuple[Lookup[T], Lookup[T] | None]:
        """The first leg: the primary under its timeout. Under ``parallel`` the fallback starts
        beside it; its outcome is returned second when the primary failed or found nothing
        (the fallback's own timeout counts from its start), else it is cancelled."""
        early = None
        if self.fallback is not None and self.strategy == "parallel":
            early = start_lookup(self.fallback, call, self.fallback_timeout_seconds)
        primary = lookup(self.primary, call, self.primary_timeout_seconds)
        if early is None:
            return primary, None
        if primary.usable:
            early.cancel()  # the primary has context: the fallback's answer is not used
            return primary, None
        return primary, early.wait()

    def run_fallback(self, call: LookupCall[T]) -> Lookup[T]:
        """The second leg run now (``sequential``): the fallback under its timeout."""
        if self.fallback is None:
            raise ValueError("this hybrid has no fallback")
        return lookup(self.fallback, call, self.fallback_timeout_seconds)

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        filters: MetadataFilter | None = None,
        config: RunnableConfig | None = None,
    ) -> HybridOutcome:
        """Run the strategy; say who served and why the fallback ran."""
        call = LookupCall(query, k, filters, config)
        primary, early = self.run_primary(call)
        if primary.usable:
            return HybridOutcome(_cut(primary.result, k), self.primary_name, False, None)
        if self.fallback is None:
            return HybridOutcome([], self.primary_name, False, None, primary.error_text)
        reason = fallback_reason(primary.error_text)
        second = early if early is not None else self.run_fallback(call)
        combined = None
        if second.error is not None:
            combined = f"{reason}; fallback '{self.fallback_name}' failed: {second.error_text}"
        documents = _cut(second.result or [], k)
        return HybridOutcome(documents, self.fallback_name, True, reason, combined)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        config = RunnableConfig(callbacks=run_manager.get_child())
        outcome = self.search(query, k=k, filters=filters, config=config)
        if outcome.error is not None and not outcome.documents:
            raise RuntimeError(outcome.error)
        return outcome.documents


def _cut(documents: list[Document], k: int | None) -> list[Document]:
    return documents[:k] if k else documents


def build_hybrid(request: BuildRequest) -> HybridRetriever:
    """Both legs built through the registry (``request.build``); a leg's own
    ``timeout_seconds`` when it sets one, else the hybrid's."""
    entry, settings = request.entry, request.settings
    primary, fallback = settings.primary, settings.fallback

    def timeout(leg: Any) -> float:
        own = leg is not None and "timeout_seconds" in leg.model_fields_set
        return leg.timeout_seconds if own else entry.timeout_seconds

    return HybridRetriever(
        primary=request.build(primary),
        fallback=None if fallback is None else request.build(fallback),
        primary_name=primary.name,
        fallback_name=fallback.name if fallback is not None else "fallback",
        strategy=settings.strategy,
        primary_timeout_seconds=timeout(primary),
        fallback_timeout_seconds=timeout(fallback),
    )
