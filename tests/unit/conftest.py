"""Shared offline fakes for the unit tests: in-test retrievers and a recording chat model.

Nothing here loads an embedding model or opens a store. Tests reach the fakes through the
``fakes`` fixture (no ``__init__.py`` in tests/, so conftest is not importable as a module).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.base import SearchKwargsRetriever, matches_filter, scored_document
from pydantic import ConfigDict, Field

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def make_doc(
    doc_id: str | None, content: str, score: float | None = None, **metadata: Any
) -> Document:
    """A retriever result in the backend contract (id, score in metadata) or a bare one."""
    if score is not None and doc_id is not None:
        return scored_document(doc_id, content, metadata, score)
    return Document(id=doc_id, page_content=content, metadata=metadata)


class ListRetriever(BaseRetriever):
    """A foreign (lexical) retriever: returns fixed documents, records every query it gets."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    docs: list[Document] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)
    lock: Any = Field(default_factory=threading.Lock)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        with self.lock:
            self.queries.append(query)
        return [d.model_copy(deep=True) for d in self.docs]


class DenseListRetriever(ListRetriever):
    """The same, declared dense (vector) so it receives HyDE views."""

    retrieval_kind: ClassVar[str] = "dense"


class FailingRetriever(BaseRetriever):
    """Raises on every call.

    Branches run on worker threads at the same time, so the call count is taken
    under a lock: ``self.calls += 1`` alone is a read-modify-write that loses a
    call when two branches fail together.
    """

    message: str = "backend down"
    calls: int = 0
    _calls_lock: ClassVar[threading.Lock] = threading.Lock()

    def _get_relevant_documents(self, query, *, run_manager):
        with self._calls_lock:
            self.calls += 1
        raise RuntimeError(self.message)


class BarrierRetriever(BaseRetriever):
    """Waits on a shared barrier: only succeeds when its sibling runs at the same time."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    barrier: threading.Barrier
    docs: list[Document] = Field(default_factory=list)

    def _get_relevant_documents(self, query, *, run_manager):
        self.barrier.wait()  # raises BrokenBarrierError after the barrier's timeout
        return list(self.docs)


class BlockingRetriever(BaseRetriever):
    """Blocks until ``release`` is set (or ``max_wait`` seconds), then returns its docs."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    release: threading.Event = Field(default_factory=threading.Event)
    max_wait: float = 2.0
    docs: list[Document] = Field(default_factory=list)
    finished: threading.Event = Field(default_factory=threading.Event)

    def _get_relevant_documents(self, query, *, run_manager):
        self.release.wait(self.max_wait)
        time.sleep(0)  # yield
        self.finished.set()
        return list(self.docs)


class FilteringRetriever(SearchKwargsRetriever):
    """Our-backend style: takes per-call ``k``/``filters`` and applies them itself."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    docs: list[Document] = Field(default_factory=list)
    received: list[dict[str, Any]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.received.append(dict(kwargs))
        filters = kwargs.get("filters")
        return [d for d in self.docs if matches_filter(d.metadata, filters)][: kwargs.get("k")]


class RecordingChatModel(FakeListChatModel):
    """A scripted fake chat model that also records the messages of every call."""

    calls: list[list[BaseMessage]] = Field(default_factory=list)

    def _call(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append(list(messages))
        return super()._call(messages, stop=stop, run_manager=run_manager, **kwargs)


class ExplodingChatModel(BaseChatModel):
    """A chat model that fails the test if anything calls it."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "exploding"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.calls += 1
        raise AssertionError("the chat model must not be called")

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.calls += 1
        raise AssertionError("the chat model must not be called")


class StaticChatModel(BaseChatModel):
    """Always answers ``text``; usable any number of times."""

    text: str = ""

    @property
    def _llm_type(self) -> str:
        return "static"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.text))])


def _branch_result(
    view_index: int,
    retriever: str,
    retriever_index: int,
    hits: list[tuple[str, int]] | list[tuple[str, int, float | None]],
    *,
    view: str | None = None,
    view_kind: str = "original",
) -> dict[str, Any]:
    """A hand-made ``BranchResult``; hits are (id, rank[, score])."""
    built = []
    for hit in hits:
        doc_id, rank = hit[0], hit[1]
        score = hit[2] if len(hit) > 2 else None
        built.append(
            {
                "id": doc_id,
                "content": f"content of {doc_id} from {retriever}/{view_index}",
                "metadata": {"from": f"q{view_index}:{retriever}"},
                "rank": rank,
                "score": score,
            }
        )
    return {
        "branch": f"q{view_index}:{retriever}",
        "view_index": view_index,
        "view": view if view is not None else f"view {view_index}",
        "view_kind": view_kind,
        "retriever": retriever,
        "retriever_index": retriever_index,
        "status": "ok" if built else "empty",
        "hits": built,
        "latency_ms": 1.0,
        "error": None,
        "warning": None,
    }


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The fake retrievers, chat models and record builders, by name."""
    return SimpleNamespace(
        doc=make_doc,
        ListRetriever=ListRetriever,
        DenseListRetriever=DenseListRetriever,
        FailingRetriever=FailingRetriever,
        BarrierRetriever=BarrierRetriever,
        BlockingRetriever=BlockingRetriever,
        FilteringRetriever=FilteringRetriever,
        RecordingChatModel=RecordingChatModel,
        ExplodingChatModel=ExplodingChatModel,
        StaticChatModel=StaticChatModel,
        branch_result=_branch_result,
    )


@pytest.fixture
def corpus(fakes) -> Callable[..., dict[str, BaseRetriever]]:
    """Factory: ``corpus(n)`` gives ``n`` named list retrievers over a tiny fixed corpus."""

    def build(n: int = 2) -> dict[str, BaseRetriever]:
        base = [
            make_doc("paris", "Paris is the capital of France.", 0.9, source="france.md"),
            make_doc("berlin", "Berlin is the capital of Germany.", 0.5, source="germany.md"),
        ]
        return {f"r{i}": ListRetriever(docs=base) for i in range(n)}

    return build


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    """Tests never pick up a developer's config file through the environment."""
    monkeypatch.delenv("PARALLEL_RAG_CONFIG", raising=False)
