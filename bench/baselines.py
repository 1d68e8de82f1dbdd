"""What the product's retrieval path is measured against, over the same retriever objects:
LangChain's ``EnsembleRetriever``, the reciprocal rank fusion a user writes by hand, and a
branch that only sleeps (so fan-out figures isolate the orchestration from any real search).

Shared by the quality section (``bench/quality.py``), the latency section (``bench/latency.py``)
and the orchestration study (``bench/orchestration.py``); it imports no bench module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.studio.evaluation import DOC_ID_KEY


class DelayRetriever(BaseRetriever):
    """A branch that sleeps a fixed time (``time.sleep`` / ``asyncio.sleep``) and returns fixed
    documents: it isolates the orchestration cost from any real search."""

    delay_s: float = 0.1
    tag: str = "r"
    hits: int = 10

    def _docs(self) -> list[Document]:
        # half of each list is shared with the other branches, so fusion has duplicates to merge
        return [
            Document(
                id=f"{'shared' if i % 2 else self.tag}-{i}",
                page_content=f"document {i} of {self.tag}",
                metadata={DOC_ID_KEY: f"{self.tag}-{i}"},
            )
            for i in range(self.hits)
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        time.sleep(self.delay_s)
        return self._docs()

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        await asyncio.sleep(self.delay_s)
        return self._docs()


def rrf_by_hand(lists: list[list[Document]], k: int, top_k: int) -> list[Document]:
    """What a user would write: RRF over ids, first copy kept."""
    scores: dict[str, float] = {}
    first: dict[str, Document] = {}
    for docs in lists:
        for rank, doc in enumerate(docs, start=1):
            key = doc.id or doc.page_content
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            first.setdefault(key, doc)
    ranked = sorted(scores, key=lambda key: -scores[key])[:top_k]
    return [first[key] for key in ranked]


def ensemble_of(retrievers: dict[str, Any], c: int = 60, weights: Sequence[float] | None = None):
    """LangChain's EnsembleRetriever over the given retriever objects (defaults: equal weights)."""
    try:
        from langchain_classic.retrievers import EnsembleRetriever
    except ImportError:  # older layouts
        from langchain.retrievers import EnsembleRetriever  # type: ignore[no-redef]

    objects = list(retrievers.values())
    return EnsembleRetriever(
        retrievers=objects, weights=list(weights or [1.0 / len(objects)] * len(objects)), c=c
    )
