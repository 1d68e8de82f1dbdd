"""Answer generators: the embedded extractive one (no model) and any LangChain chat model.

Both read the fused documents as numbered evidence blocks and cite them ``[n]``; with no usable
evidence both return ``INSUFFICIENT_EVIDENCE`` without inventing anything (the LLM one without
even calling the model).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from parallel_rag.nodes import prompts
from parallel_rag.backends.text_analysis import analyze

InjectionMode = Literal["tool_role", "system_prompt"]
_SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
# "[2]" or a group "[1, 3]"; the leading space goes with it when a citation is dropped
_CITATION = re.compile(r"([ \t]*)\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]")
_CITATION_SEPARATOR = re.compile(r"\s*[,;]\s*")
_LINE_START_CITATION = re.compile(r"(?m)^([ \t]*)\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\][ \t]*")


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
        if len(line.split()) < 5 and not line.endswith((".", "!", "?")):
            continue  # a title or label line, not a sentence
        sentences.extend(s.strip() for s in _SENTENCE_BOUNDARY.split(line) if s.strip())
    return sentences


def cited_numbers(answer: str, available: int) -> tuple[list[int], list[int]]:
    """Citation numbers in ``answer``: (valid ones in order of first use, invalid ones)."""
    valid: list[int] = []
    invalid: list[int] = []
    for match in _CITATION.finditer(answer):
        for number in _kept_numbers(match.group(2), available)[0]:
            target = valid if 1 <= number <= available else invalid
            if number not in target:
                target.append(number)
    return valid, invalid


def _kept_numbers(numbers_text: str, available: int) -> tuple[list[int], list[int]]:
    numbers = [int(part) for part in _CITATION_SEPARATOR.split(numbers_text)]
    return numbers, list(dict.fromkeys(n for n in numbers if 1 <= n <= available))


def drop_invalid_citations(answer: str, available: int) -> str:
    """``answer`` without citations of evidence numbers outside ``1..available``
    (``[2, 9]`` becomes ``[2]``; ``[9]`` disappears with the space before it)."""

    def drop_line_opener(match: re.Match) -> str:
        _, kept = _kept_numbers(match.group(2), available)
        return match.group(0) if kept else match.group(1)  # gone, with the spaces after it

    def keep_valid(match: re.Match) -> str:
        lead, numbers_text = match.groups()
        numbers, kept = _kept_numbers(numbers_text, available)
        if len(kept) == len(numbers):
            return match.group(0)
        if kept:
            return f"{lead}[{', '.join(map(str, kept))}]"
        # dropped whole: the space before it stays only when a word or citation follows directly
        following = match.string[match.end() : match.end() + 1]
        return lead if following and (following.isalnum() or following in "[(") else ""

    return _CITATION.sub(keep_valid, _LINE_START_CITATION.sub(drop_line_opener, answer))


def check_citations(text: str, available: int) -> GeneratedAnswer:
    """A chat model's reply as a result: citations parsed and checked against the evidence
    numbers; invalid ones are dropped and warned about, never passed on as real."""
    text = text.strip() or prompts.INSUFFICIENT_EVIDENCE
    valid, invalid = cited_numbers(text, available)
    warnings = []
    if invalid:
        text = drop_invalid_citations(text, available).strip()
        warnings.append(
            f"generator cited evidence that does not exist: {invalid} "
            f"(evidence is numbered 1..{available}); citations dropped"
        )
    if not valid and text != prompts.INSUFFICIENT_EVIDENCE:
        warnings.append("generator answer cites no evidence block")
    return GeneratedAnswer(text, valid, warnings)


class ExtractiveGenerator:
    """Picks the evidence sentences that best answer the query and cites each one.

    A sentence counts as evidence when it shares at least ``min_term_overlap`` of the query's
    (stemmed) terms, or, when an embedding model is given, when its cosine similarity with the
    query reaches ``min_similarity`` (so paraphrased questions still find their answer). Score:
    similarity plus IDF-weighted term coverage, damped by sentence length and by the
    document's fused rank. No model generates text: every word of the answer is evidence.
    """

    def __init__(
        self,
        max_sentences: int = 3,
        min_term_overlap: float = 0.25,
        embeddings: Callable[[], Any] | None = None,
        min_similarity: float = 0.3,
        sentence_cache_size: int = 20_000,
    ):
        self.max_sentences = max_sentences
        self.min_term_overlap = min_term_overlap
        self.embeddings = embeddings
        self.min_similarity = min_similarity
        self.sentence_cache_size = sentence_cache_size
        self._sentence_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    def _sentence_matrix(self, model: Any, sentences: list[str]) -> np.ndarray:
        """Sentence vectors, embedding only those not seen lately: the same corpus sentences
        come back request after request, and embedding them dominated the cost of an answer.
        The cache is a bounded LRU (``sentence_cache_size`` vectors, float32), so memory stays
        flat however many requests are served."""
        with self._cache_lock:
            cached = {s: self._sentence_vectors.get(s) for s in dict.fromkeys(sentences)}
            for sentence, vector in cached.items():
                if vector is not None:
                    self._sentence_vectors.move_to_end(sentence)
        missing = [s for s, vector in cached.items() if vector is None]
        if missing:
            fresh = np.asarray(model.embed_documents(missing), dtype=np.float32)
            cached.update(zip(missing, fresh, strict=True))
            if self.sentence_cache_size > 0:
                with self._cache_lock:
                    for sentence, vector in zip(missing, fresh, strict=True):
                        self._sentence_vectors[sentence] = vector
                    while len(self._sentence_vectors) > self.sentence_cache_size:
                        self._sentence_vectors.popitem(last=False)
        return np.stack([cached[s] for s in sentences])

    def _similarities(self, query: str, sentences: list[str]) -> list[float]:
        if self.embeddings is None or not sentences:
            return [0.0] * len(sentences)
        model = self.embeddings()
        query_vector = np.asarray(model.embed_query(query), dtype=np.float32)
        vectors = self._sentence_matrix(model, sentences)
        norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(query_vector)
        return (vectors @ query_vector / np.where(norms == 0, 1, norms)).tolist()

    def generate(
        self, query: str, documents: Sequence[Mapping[str, Any]], config=None
    ) -> GeneratedAnswer:
        query_terms = set(analyze(query))
        candidates: list[tuple[int, int, str, set[str]]] = []
        for number, doc in enumerate(documents, start=1):
            for position, sentence in enumerate(split_sentences(doc["content"])):
                candidates.append((number, position, sentence, set(analyze(sentence))))
        if not candidates:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        similarities = self._similarities(query, [c[2] for c in candidates])
        df = Counter(term for *_, terms in candidates for term in terms & query_terms)
        total_idf = sum(math.log(1 + len(candidates) / (df[t] or 1)) for t in query_terms) or 1.0
        needed = max(1, math.ceil(self.min_term_overlap * len(query_terms)))
        scored = []
        for (number, position, sentence, terms), similarity in zip(
            candidates, similarities, strict=True
        ):
            matched = terms & query_terms
            lexical = bool(query_terms) and len(matched) >= needed
            semantic = self.embeddings is not None and similarity >= self.min_similarity
            if not (lexical or semantic):
                continue
            coverage = sum(math.log(1 + len(candidates) / df[t]) for t in matched) / total_idf
            relevance = max(similarity, 0.0) + (coverage if lexical else 0.0)
            score = relevance / (1 + 0.1 * (number - 1)) / max(1.0, len(terms) / 25) ** 0.5
            scored.append((-score, number, position, sentence))
        if not scored:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        chosen = sorted(scored)[: self.max_sentences]
        parts = [f"{sentence} [{number}]" for _, number, _, sentence in chosen]
        numbers = list(dict.fromkeys(number for _, number, _, _ in chosen))
        return GeneratedAnswer(" ".join(parts), numbers)


def neutralize(text: str) -> str:
    """Untrusted text made inert inside an evidence block: ``<`` and ``>`` become ``&lt;`` and
    ``&gt;``, so it can neither close its ``</evidence>`` tag nor spell a chat template's
    special tokens (``<|im_end|>``, ``<|im_start|>system``...) that a server would parse."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _evidence_block(number: int, source: str, content: str) -> str:
    return f"[{number}] (source: {source})\n<evidence>\n{content}\n</evidence>"


CUT_MARK = "\n..."
"""Ends evidence that ``max_context_length`` cut, after the last (closed) block."""


def format_evidence(documents: Sequence[Mapping[str, Any]], max_chars: int) -> str:
    """Numbered evidence blocks, each body between ``<evidence>`` tags it cannot close.

    Retrieved text is untrusted: the body and the source are ``neutralize``d and
    the source kept on one line, so instructions in a document ("ignore previous
    instructions", a fake ``[2] (source: ...)`` header, a closing tag) stay data inside their
    own block. Longer than ``max_chars``: the blocks that fit are kept, the next one is cut
    (and still closed), the rest left out, and the text ends with ``...``.
    """
    blocks = []
    for number, doc in enumerate(documents, start=1):
        source = doc.get("metadata", {}).get("source") or doc["id"]
        source = neutralize(" ".join(str(source).split()))
        blocks.append((number, source, neutralize(doc["content"].strip())))
    full = prompts.EVIDENCE_HEADER + "".join("\n\n" + _evidence_block(*block) for block in blocks)
    if len(full) <= max_chars:
        return full
    room = max_chars - len(CUT_MARK)
    text = prompts.EVIDENCE_HEADER
    if len(text) > room:
        return (text[: max(0, max_chars - 3)] + "...")[:max_chars]
    for number, source, content in blocks:
        block = "\n\n" + _evidence_block(number, source, content)
        if len(text) + len(block) <= room:
            text += block
            continue
        spare = room - len(text) - len("\n\n" + _evidence_block(number, source, ""))
        if spare > 0:
            text += "\n\n" + _evidence_block(number, source, content[:spare].rstrip())
        break
    return text + CUT_MARK


EVIDENCE_CALL_ID = "call_evidence_0"


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
        """The conversation sent to the model, evidence placed by ``injection_mode``."""
        evidence = format_evidence(documents, self.max_context_length)
        if self.injection_mode == "system_prompt":
            system = "\n\n".join(part for part in (evidence, self.system_prompt) if part)
            return [SystemMessage(system), HumanMessage(query)]
        call_id = EVIDENCE_CALL_ID
        messages: list[BaseMessage] = (
            [SystemMessage(self.system_prompt)] if self.system_prompt else []
        )
        return messages + [
            HumanMessage(query),
            # non-empty content: llama.cpp's server (and other strict ones) refuse a null
            # assistant content, and chat templates that ignore tool_calls still show a turn
            AIMessage(
                content=prompts.EVIDENCE_TOOL_CALL_CONTENT,
                tool_calls=[
                    {"id": call_id, "name": prompts.EVIDENCE_TOOL_NAME, "args": {"query": query}}
                ],
            ),
            ToolMessage(evidence, tool_call_id=call_id, name=prompts.EVIDENCE_TOOL_NAME),
        ]

    def generate(self, query: str, documents: Sequence[Mapping[str, Any]], config=None):
        """Call the model with the node's ``config`` (so LangGraph's messages stream sees its
        tokens); with no documents, answer without calling it."""
        if not documents:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        message = self.model.invoke(self.build_messages(query, documents), config)
        return check_citations(message.text, len(documents))
