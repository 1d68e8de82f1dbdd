"""The ``generate`` node: a grounded, cited answer from the fused documents.

No evidence at all means the fixed insufficient-evidence sentence, and no model call. The
result's ``citations`` map each cited number back to the document it names. The chat model is
called with the node's ``RunnableConfig``, so ``stream_mode="messages"`` streams its tokens out
of the graph (tagged ``langgraph_node: generate``). A failing chat model follows ``on_failure``:
``block`` stops the request; ``skip``/``warn`` answer with the insufficient-evidence sentence
(``warn`` also says why), so nothing is ever invented.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.errors import GraphBubbleUp
from parallel_rag.nodes.generate.generators import GeneratedAnswer
from parallel_rag.nodes.prompts import INSUFFICIENT_EVIDENCE
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.records import Citation, FailurePolicy
from parallel_rag.nodes.retrieve import describe_error

logger = logging.getLogger(__name__)


class GenerateNode:
    """Wraps a generator (extractive or chat model) with the shared before/after steps."""

    def __init__(self, generator: Any, *, on_failure: FailurePolicy = "warn"):
        self.generator = generator
        self.on_failure = on_failure

    @staticmethod
    def _finish(state: dict[str, Any], started: float, generated: GeneratedAnswer) -> dict:
        documents = state.get("documents") or []
        citations = [
            Citation(
                number=n,
                id=documents[n - 1]["id"],
                source=documents[n - 1]["metadata"].get("source"),
            )
            for n in generated.cited_numbers
        ]
        return {
            "answer": generated.answer,
            "citations": citations,
            "warnings": generated.warnings,
            "timings": {"generate": (time.perf_counter() - started) * 1000},
        }

    def _failed(self, error: Exception) -> GeneratedAnswer:
        message = describe_error(error)
        if self.on_failure == "block":
            raise BlockedError("generator", message) from error
        logger.warning("generator failed (on_failure=%s): %s", self.on_failure, message)
        warnings = [f"generator failed, no answer generated: {message}"]
        return GeneratedAnswer(
            INSUFFICIENT_EVIDENCE, [], warnings if self.on_failure == "warn" else []
        )

    def invoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        documents = state.get("documents") or []
        if not documents:
            return self._finish(state, started, GeneratedAnswer(INSUFFICIENT_EVIDENCE, []))
        try:
            generated = self.generator.generate(state["query"], documents, config)
        except GraphBubbleUp:
            raise  # interrupts and other control flow belong to LangGraph
        except Exception as error:
            generated = self._failed(error)
        return self._finish(state, started, generated)

    async def ainvoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        documents = state.get("documents") or []
        if not documents:
            return self._finish(state, started, GeneratedAnswer(INSUFFICIENT_EVIDENCE, []))
        try:
            generated = await self.generator.agenerate(state["query"], documents, config)
        except GraphBubbleUp:
            raise  # interrupts and other control flow belong to LangGraph
        except Exception as error:
            generated = self._failed(error)
        return self._finish(state, started, generated)

    def as_runnable(self) -> RunnableLambda:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="generate")
