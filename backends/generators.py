"""Answer generators: the embedded extractive one (no model) and any LangChain chat model.

Both read the fused documents as numbered evidence blocks and cite them ``[n]``; with no usable
evidence both return ``INSUFFICIENT_EVIDENCE`` without inventing anything (the LLM one without
even calling the model).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from parallel_rag.backends import prompts
from parallel_rag.backends.text_analysis import analyze

InjectionMode = Literal["tool_role", "system_prompt"]
_SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_CITATION = re.compile(r"\[(\d{1,3})\]")


@dataclass
class GeneratedAnswer:
    """An answer, the evidence numbers it cites, and anything worth warning about."""

    answer: str
    cited_numbers: list[int]
    warnings: list[str] = field(default_factory=list)


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage; markdown headings and list markers are not sentences."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"^[-*\u2022]\s+", "", line)
        sentences.extend(s.strip() for s in _SENTENCE_BOUNDARY.split(line) if s.strip())
    return sentences


def cited_numbers(answer: str, available: int) -> tuple[list[int], list[int]]:
    """Citation numbers in ``answer``: (valid ones in order of first use, invalid ones)."""
    valid: list[int] = []
    invalid: list[int] = []
    for match in _CITATION.finditer(answer):
        number = int(match.group(1))
        target = valid if 1 <= number <= available else invalid
        if number not in target:
            target.append(number)
    return valid, invalid


class ExtractiveGenerator:
    """Picks the evidence sentences that best cover the query's terms and cites each one.

    Sentence score: the IDF-weighted query terms it contains (IDF over all evidence sentences),
    damped by sentence length and by the document's fused rank. A sentence must share at least
    ``min_term_overlap`` of the query's terms to count as evidence.
    """

    def __init__(self, max_sentences: int = 3, min_term_overlap: float = 0.25):
        self.max_sentences = max_sentences
        self.min_term_overlap = min_term_overlap

    def generate(
        self, query: str, documents: Sequence[Mapping[str, Any]], config=None
    ) -> GeneratedAnswer:
        query_terms = set(analyze(query))
        candidates: list[tuple[int, int, str, set[str]]] = []
        for number, doc in enumerate(documents, start=1):
            for position, sentence in enumerate(split_sentences(doc["content"])):
                candidates.append((number, position, sentence, set(analyze(sentence))))
        if not query_terms or not candidates:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        df = Counter(term for *_, terms in candidates for term in terms & query_terms)
        total_idf = sum(math.log(1 + len(candidates) / (df[t] or 1)) for t in query_terms)
        scored = []
        for number, position, sentence, terms in candidates:
            matched = terms & query_terms
            if len(matched) < max(1, math.ceil(self.min_term_overlap * len(query_terms))):
                continue
            coverage = sum(math.log(1 + len(candidates) / df[t]) for t in matched) / total_idf
            score = coverage / (1 + 0.1 * (number - 1)) / max(1.0, len(terms) / 25) ** 0.5
            scored.append((-score, number, position, sentence))
        if not scored:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        chosen = sorted(scored)[: self.max_sentences]
        parts = [f"{sentence} [{number}]" for _, number, _, sentence in chosen]
        numbers = list(dict.fromkeys(number for _, number, _, _ in chosen))
        return GeneratedAnswer(" ".join(parts), numbers)

    async def agenerate(self, query: str, documents: Sequence[Mapping[str, Any]], config=None):
        return self.generate(query, documents)


def format_evidence(documents: Sequence[Mapping[str, Any]], max_chars: int) -> str:
    """Numbered evidence blocks, cut to ``max_chars`` characters with a trailing ``...``."""
    blocks = []
    for number, doc in enumerate(documents, start=1):
        source = doc.get("metadata", {}).get("source") or doc["id"]
        blocks.append(f"[{number}] (source: {source})\n{doc['content'].strip()}")
    text = prompts.EVIDENCE_HEADER + "\n\n" + "\n\n".join(blocks)
    if len(text) > max_chars:
        text = text[: max(0, max_chars - 3)] + "..."
    return text


class ChatModelGenerator:
    """Grounded generation with any LangChain chat model (``ChatOpenAI`` for compatible servers).

    ``tool_role`` puts the evidence in a tool message answering an assistant tool call (both are
    sent, so strict OpenAI-compatible servers accept the history); ``system_prompt`` prepends it
    to the system message.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        injection_mode: InjectionMode = "tool_role",
        max_context_length: int = 10000,
        system_prompt: str = prompts.GENERATOR_SYSTEM_PROMPT,
    ):
        self.model = model
        self.injection_mode = injection_mode
        self.max_context_length = max_context_length
        self.system_prompt = system_prompt

    def build_messages(
        self, query: str, documents: Sequence[Mapping[str, Any]]
    ) -> list[BaseMessage]:
        evidence = format_evidence(documents, self.max_context_length)
        if self.injection_mode == "system_prompt":
            return [SystemMessage(evidence + "\n\n" + self.system_prompt), HumanMessage(query)]
        call_id = "call_evidence_0"
        return [
            SystemMessage(self.system_prompt),
            HumanMessage(query),
            AIMessage(
                content="",
                tool_calls=[
                    {"id": call_id, "name": prompts.EVIDENCE_TOOL_NAME, "args": {"query": query}}
                ],
            ),
            ToolMessage(evidence, tool_call_id=call_id, name=prompts.EVIDENCE_TOOL_NAME),
        ]

    def _finish(self, text: str, count: int) -> GeneratedAnswer:
        text = text.strip() or prompts.INSUFFICIENT_EVIDENCE
        valid, invalid = cited_numbers(text, count)
        warnings = []
        if invalid:
            for number in invalid:
                text = text.replace(f"[{number}]", "")
            warnings.append(
                f"generator cited evidence that does not exist: {invalid}; citations dropped"
            )
        return GeneratedAnswer(text.strip(), valid, warnings)

    def generate(self, query: str, documents: Sequence[Mapping[str, Any]], config=None):
        if not documents:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        message = self.model.invoke(self.build_messages(query, documents), config)
        return self._finish(str(message.content), len(documents))

    async def agenerate(self, query: str, documents: Sequence[Mapping[str, Any]], config=None):
        if not documents:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        message = await self.model.ainvoke(self.build_messages(query, documents), config)
        return self._finish(str(message.content), len(documents))
