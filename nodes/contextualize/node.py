"""The ``contextualize`` node: what a conversation retrieves on.

It runs when the conversation has earlier messages (the entry routes a first turn straight to
retrieval, so a one-question run costs nothing more than before). It reads the recent turns
(``history.recent_turns``), decides whether the last question refers back to them and writes
the question the branches search (``query``): with a chat model configured, the model's
standalone question; else the LLM-free carry-over of the subject (``carry_over.resolve``). The
question as written goes on as ``follow_up``, which the fan-out keeps as a query view of its
own, so a wrong resolution adds a view and cannot lose the question. ``resolution`` records
what was retrieved on and why.

In a thread (a checkpointer keeps the state between runs) this is also where a turn starts
clean: the accumulating channels (branch results, warnings, timings) are overwritten here, so
one turn's records never mix with the last one's.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Overwrite
from parallel_rag.backends.shared.secrets import describe_error
from parallel_rag.nodes.contextualize.carry_over import Resolution, resolve
from parallel_rag.nodes.contextualize.condense import condense
from parallel_rag.nodes.contextualize.history import Turn, recent_turns
from parallel_rag.nodes.contextualize.records import first_turn_record  # noqa: F401
from parallel_rag.nodes.records import ResolutionRecord


def has_earlier_turns(state: dict[str, Any]) -> bool:
    """Whether the run's conversation holds anything before its question (the entry's test)."""
    return len(state.get("messages") or ()) > 1


def resolution_record(resolution: Resolution, method: str) -> ResolutionRecord:
    record = ResolutionRecord(
        question=resolution.question,
        retrieved_on=resolution.standalone,
        method=method if resolution.resolved else "as_written",  # type: ignore[typeddict-item]
        reason=resolution.reason,
    )
    if resolution.subject:
        record["subject"] = resolution.subject
    return record


def resolve_conversation(
    messages: list[Any],
    model: BaseChatModel | None = None,
    config: RunnableConfig | None = None,
) -> tuple[ResolutionRecord, list[Turn], list[str]]:
    """The one step every surface resolves a conversation with: its record, the recent turns
    it read, and warnings (a chat model that failed: the LLM-free resolution stands in)."""
    question = messages[-1].text if messages else ""
    turns = recent_turns(messages)
    resolution = resolve(question, turns)
    warnings: list[str] = []
    if model is None or not resolution.resolved:
        return resolution_record(resolution, "carry_over"), turns, warnings
    try:
        written = condense(model, question, turns, config)
    except Exception as error:  # the model is optional: never lose the turn to it
        warnings.append(
            f"conversation model failed ({describe_error(error)}); carried over instead"
        )
        return resolution_record(resolution, "carry_over"), turns, warnings
    if written is None or written.strip() == question.strip():
        return resolution_record(resolution, "carry_over"), turns, warnings
    record = ResolutionRecord(
        question=question,
        retrieved_on=written,
        method="chat_model",
        reason=f"the chat model wrote it out ({resolution.reason})",
    )
    return record, turns, warnings


class ContextualizeNode:
    """Resolves the question against the earlier turns; ``model`` is the optional chat model."""

    def __init__(self, model: BaseChatModel | None = None):
        self.model = model

    def invoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        messages = state.get("messages") or [HumanMessage(state["query"])]
        record, _, warnings = resolve_conversation(messages, self.model, config)
        resolved = record["retrieved_on"] != record["question"]
        return {
            "query": record["retrieved_on"],
            "follow_up": record["question"] if resolved else None,
            "resolution": record,
            # a new turn of a thread starts clean (these channels accumulate within a turn)
            "branch_results": Overwrite([]),
            "warnings": Overwrite(warnings),
            "timings": Overwrite({"contextualize": (time.perf_counter() - started) * 1000}),
        }


def answer_message(
    answer: str,
    citations: list[dict[str, Any]],
    labels: list[str],
    message_id: str | None = None,
) -> AIMessage:
    """The turn the graph appends to the conversation: its answer and the sources it cites
    (file and place, never the evidence text), so a thread reads as a conversation. A chat
    model's answer keeps the id of the reply whose tokens were streamed, so a messages stream
    (Studio's chat) shows it once, not twice."""
    content = answer
    if labels:
        content += "\n\nSources:\n" + "\n".join(labels)
    extra = {"id": message_id} if message_id else {}
    return AIMessage(content=content, response_metadata={"citations": citations}, **extra)
