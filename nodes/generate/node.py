"""The ``generate`` node: a grounded, cited answer from the fused documents.

No evidence at all means the fixed insufficient-evidence sentence, and no model call. The
answer joins the conversation (``messages``) as an AI message with its sources listed; a chat
model also sees the recent turns before the question. The
result's ``citations`` map each cited number back to the document it names. The chat model is
called with the node's ``RunnableConfig``, so ``stream_mode="messages"`` streams its tokens out
of the graph (tagged ``langgraph_node: generate``). A failing chat model follows ``on_failure``:
``block`` stops the request; ``skip``/``warn`` answer with the insufficient-evidence sentence
(``warn`` also says why), so nothing is ever invented.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from parallel_rag.nodes.contextualize.history import recent_turns
from parallel_rag.nodes.contextualize.node import answer_message
from parallel_rag.nodes.failure_policy import FailurePolicy, attempt
from parallel_rag.nodes.generate.citations import GeneratedAnswer, citation, source_label
from parallel_rag.nodes.prompts import INSUFFICIENT_EVIDENCE


class GenerateNode:
    """Wraps a generator (extractive or chat model) with the shared before/after steps."""

    def __init__(self, generator: Any, *, on_failure: FailurePolicy = "warn"):
        self.generator = generator
        self.on_failure = on_failure

    def invoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        documents = state.get("documents") or []
        generated = GeneratedAnswer(INSUFFICIENT_EVIDENCE, [])
        messages = state.get("messages") or []
        # a generator that reads the conversation (a chat model) gets its recent turns
        reads_history = getattr(self.generator, "reads_history", False) and len(messages) > 1
        extra = {"history": recent_turns(messages)} if reads_history else {}
        if documents:
            done = attempt(
                lambda: self.generator.generate(state["query"], documents, config, **extra),
                self.on_failure,
                "generator",
                warning="generator failed, no answer generated",
            )
            if done.failed:  # nothing is invented: the insufficient-evidence sentence
                generated = GeneratedAnswer(INSUFFICIENT_EVIDENCE, [], done.warnings)
            else:
                generated = done.value
        citations = [citation(n, documents[n - 1]) for n in generated.cited_numbers]
        labels = [f"[{n}] {source_label(documents[n - 1])}" for n in generated.cited_numbers]
        return {
            # the conversation's next turn: the answer and where it comes from, no evidence
            "messages": [answer_message(generated.answer, citations, labels, generated.message_id)],
            "answer": generated.answer,
            "citations": citations,
            "warnings": generated.warnings,
            "timings": {"generate": (time.perf_counter() - started) * 1000},
        }
