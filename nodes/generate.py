"""The ``generate`` node: a grounded, cited answer from the fused documents.

No evidence at all means the fixed insufficient-evidence sentence, and no model call. The
result's ``citations`` map each cited number back to the document it names.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from parallel_rag.backends.generators import GeneratedAnswer
from parallel_rag.backends.prompts import INSUFFICIENT_EVIDENCE
from parallel_rag.nodes.records import Citation


class GenerateNode:
    """Wraps a generator (extractive or chat model) with the shared before/after steps."""

    def __init__(self, generator: Any):
        self.generator = generator

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

    def invoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        documents = state.get("documents") or []
        if not documents:
            return self._finish(state, started, GeneratedAnswer(INSUFFICIENT_EVIDENCE, []))
        generated = self.generator.generate(state["query"], documents, config)
        return self._finish(state, started, generated)

    async def ainvoke(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        documents = state.get("documents") or []
        if not documents:
            return self._finish(state, started, GeneratedAnswer(INSUFFICIENT_EVIDENCE, []))
        generated = await self.generator.agenerate(state["query"], documents, config)
        return self._finish(state, started, generated)

    def as_runnable(self) -> RunnableLambda:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="generate")
