"""What a request's conversation retrieves on, decided the way its route's graph decides it.

The router keys its context cache on what a request is retrieved on, so it resolves the
conversation itself before the lookup, with the step the graph's ``contextualize`` node runs
(``resolve_conversation``) on the same turns the graph is then given. Without a chat model (the
default) that step is LLM-free and deterministic: the graph, run on a miss, resolves the same
turns to the same record. A route that configures a conversation model (``conversation.llm``
in its plugin block) gets that model with a memo of its replies (``memoised_model``), shared by
the router and the route's graph: the router's call and the graph's call for one conversation
are one model call, and they cannot disagree about what was retrieved on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.caches import InMemoryCache
from langchain_core.language_models import BaseChatModel
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.graph.state import MAX_QUERY_CHARS
from parallel_rag.nodes.chat_models import make_chat_model
from parallel_rag.nodes.contextualize.history import coerce_messages
from parallel_rag.nodes.contextualize.node import resolve_conversation
from parallel_rag.nodes.contextualize.records import first_turn_record
from parallel_rag.nodes.records import ResolutionRecord

MEMO_ENTRIES = 1024
"""Standalone questions a route's conversation model remembers (a few hundred bytes each)."""


class LockedMemo(InMemoryCache):
    """LangChain's in-memory model cache with a lock: the router's request threads and the
    graph's node threads use one model at once, and the bounded cache evicts on ``update``."""

    def __init__(self, maxsize: int = MEMO_ENTRIES):
        super().__init__(maxsize=maxsize)
        self._lock = threading.Lock()

    def lookup(self, prompt: str, llm_string: str) -> Any:
        with self._lock:
            return super().lookup(prompt, llm_string)

    def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
        with self._lock:
            super().update(prompt, llm_string, return_val)

    def clear(self, **kwargs: Any) -> None:
        with self._lock:
            super().clear(**kwargs)


def memoised_model(model: BaseChatModel) -> BaseChatModel:
    """``model`` answering a prompt it has answered before from memory (LangChain's own
    model cache, ``BaseChatModel.cache``)."""
    model.cache = LockedMemo()
    return model


def conversation_model(pipeline: PipelineConfig | None) -> BaseChatModel | None:
    """The route's conversation model, memoised; None when it configures none (carry-over)."""
    if pipeline is None or pipeline.conversation.llm is None:
        return None
    return memoised_model(make_chat_model(pipeline.conversation.llm))


def as_turns(conversation: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A bare question (a caller of ``retrieve`` from before conversations) as one turn."""
    if isinstance(conversation, str):
        return [{"role": "user", "content": conversation[:MAX_QUERY_CHARS]}]
    return [dict(turn) for turn in conversation]


def resolution_of(
    turns: Sequence[Mapping[str, Any]], model: BaseChatModel | None = None
) -> ResolutionRecord:
    """What the route's graph retrieves on for ``turns`` (``request.conversation_turns``):
    its ``ResolutionRecord``. A failing model falls back to the carry-over, as in the graph."""
    messages = coerce_messages(list(turns), max_question_chars=MAX_QUERY_CHARS)
    if len(messages) == 1:  # the graph does not contextualize a first turn either
        return first_turn_record(messages[0].text)
    record, _, _ = resolve_conversation(messages, model)
    return record
