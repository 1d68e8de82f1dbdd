"""The contract every parallel-rag backend retriever follows.

A backend is a plain LangChain ``BaseRetriever``: it can be used alone in any LCEL chain. On top
of that, our backends accept per-call ``k`` and ``filters`` keyword arguments (LangChain forwards
``invoke(query, **kwargs)`` to ``_get_relevant_documents``) and return documents that carry a
stable ``id`` and their retrieval score in ``metadata[SCORE_KEY]``. The retrieve node pops the
score out of the metadata into the branch's source record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor

SCORE_KEY = "retrieval_score"
"""Metadata key under which a backend reports a document's retrieval score."""

RetrievalKind = Literal["lexical", "dense"]
"""Lexical branches never receive HyDE views; dense ones do."""

MetadataFilter = Mapping[str, str | int | float | bool]
"""Flat metadata equality filter: every key must equal its value."""


class StoreInUseError(RuntimeError):
    """An embedded store (Qdrant local mode, Milvus Lite) is locked by another process; the
    message names the path and what to do instead."""

    def __init__(self, store: str, path: str, server: str):
        self.store = store
        self.path = path
        super().__init__(
            f"{store} at {path} is in use by another process: an embedded store allows one "
            f"process per path. Stop the other process (a server or an ingest), give each "
            f"process its own copy of the folder, or use a {server} server."
        )


def matches_filter(metadata: Mapping[str, Any], filters: MetadataFilter | None) -> bool:
    """True when every filter key is present in ``metadata`` with an equal value."""
    if not filters:
        return True
    return all(key in metadata and metadata[key] == value for key, value in filters.items())


def retrieval_kind_of(retriever: Any) -> RetrievalKind:
    """Kind of a retriever; foreign ones count as lexical unless vector-store backed."""
    declared = getattr(retriever, "retrieval_kind", None)
    if declared in ("lexical", "dense"):
        return declared
    if hasattr(retriever, "vectorstore"):
        return "dense"
    return "lexical"


def scored_document(
    doc_id: str, content: str, metadata: Mapping[str, Any], score: float
) -> Document:
    """A result document in the backend contract: stable id, score in metadata."""
    return Document(id=doc_id, page_content=content, metadata={**metadata, SCORE_KEY: float(score)})


def supports_search_kwargs(retriever: Any) -> bool:
    """Our backends take ``k``/``filters`` per call; foreign retrievers are post-filtered."""
    return bool(getattr(retriever, "accepts_search_kwargs", False))


class SearchKwargsRetriever(BaseRetriever):
    """Base for our backends: per-call ``k``/``filters`` reach the sync search on both paths
    (LangChain's default async path would drop them), run off the event loop."""

    accepts_search_kwargs: ClassVar[bool] = True

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        **kwargs: Any,
    ) -> list[Document]:
        return await run_in_executor(
            None,
            self._get_relevant_documents,
            query,
            run_manager=run_manager.get_sync(),
            **kwargs,
        )
