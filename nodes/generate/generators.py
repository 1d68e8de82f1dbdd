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
from parallel_rag.backends.text_analysis import analyze
from parallel_rag.nodes import prompts

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


_ANAPHOR = re.compile(
    r"^[\"'(]?(?:It|He|She|They|His|Her|Its|Their|Them|This|These|Those|The (?:latter|former))\b"
)
_YEAR = re.compile(r"\b(?:1\d{3}|20\d{2})s?\b")
_MONTH = re.compile(
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\b"
)
_NUMBER = re.compile(
    r"\b\d[\d,.]*\b|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"hundred|thousand|million|billion)\b",
    re.IGNORECASE,
)
_DATE_QUESTION = re.compile(
    r"\bwhen\b|\b(?:what|which) (?:year|date|decade|century|month|day)\b", re.IGNORECASE
)
_NUMBER_QUESTION = re.compile(
    r"\bhow (?:many|much|long|old|tall|high|far|big|large|wide|deep|heavy)\b"
    r"|\bwhat (?:is the )?(?:population|number|percentage|age|size|length|height)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")
_DEFINITE = re.compile(r"^The (\w+)\b")
_NOT_A_NAME = frozenset({"the", "a", "an", "in", "on", "at", "it", "he", "she", "they", "this"})


def answer_kind(query: str) -> Literal["date", "number", "name"]:
    """What the question asks for: a date ("when", "what year"), a quantity ("how many") or,
    by default, a name (who, which, what...)."""
    if _DATE_QUESTION.search(query):
        return "date"
    if _NUMBER_QUESTION.search(query):
        return "number"
    return "name"


def offers_answer(kind: str, sentence: str, query_words: set[str]) -> float:
    """How much of the asked-for kind the sentence brings that the question does not already
    say: a year or month for a date, a number for a quantity, capitalised words for a name
    (up to three, as 0..1)."""
    if kind == "date":
        found = _YEAR.findall(sentence) + _MONTH.findall(sentence)
        return float(any(m.lower() not in query_words for m in found))
    if kind == "number":
        found = _NUMBER.findall(sentence)
        return float(any(m.lower().strip(".,") not in query_words for m in found))
    names = 0
    for i, word in enumerate(sentence.split()):
        token = word.strip("\"'()[],.;:!?")
        if not token[:1].isupper() or (i == 0 and token.lower() in _NOT_A_NAME):
            continue
        names += token.lower() not in query_words
    return min(names, 3) / 3


def opens_with_reference(sentence: str, title: str) -> bool:
    """Whether the sentence's subject is left to an earlier sentence: a leading pronoun
    ("It is often described as...") or "The <word of the title>" ("The bridge was designed
    by..." in the Forth Bridge article) without the title itself."""
    if _ANAPHOR.match(sentence):
        return True
    definite = _DEFINITE.match(sentence)
    title_words = {w.lower() for w in _WORD.findall(title)}
    return bool(definite) and definite.group(1).lower() in title_words and title not in sentence


def document_title(document: Mapping[str, Any]) -> str:
    """The document's title: its ``title`` metadata, else a first line that is a heading or
    has no closing punctuation (a title line, not a sentence)."""
    title = (document.get("metadata") or {}).get("title")
    if title:
        return str(title).strip()
    lines = document["content"].strip().splitlines()
    first = lines[0].strip() if len(lines) > 1 else ""
    if first.startswith("#") or (first and not first.endswith((".", "!", "?", ":"))):
        return first.lstrip("#").strip()
    return ""


@dataclass(eq=False)
class _Sentence:
    number: int  # the document's evidence number
    position: int  # the sentence's place in that document
    text: str
    words: int
    features: dict[str, float]
    eligible: bool  # shares enough of the query (with its title) or is similar enough
    score: float = 0.0


class ExtractiveGenerator:
    """Picks the evidence sentences that answer the query and cites each one.

    Every sentence of the fused documents is scored on the query with the embedding model (when
    given) and lexical evidence together: IDF-weighted coverage of the query's stemmed terms by
    the sentence, by the sentence with its document's title (whose subject "It" or "She" often
    stands for) and by the whole document; whether the sentence brings what the question asks
    for (a date for "when", a number for "how many", a name otherwise) beyond the question's
    own words; whether the document is the bridge of a two-step question (its title is named
    by another retrieved document and not by the question); the document's fused rank; the
    sentence's place (the first sentence of an article usually defines its subject) and its
    neighbours' similarity. The weights were fitted on HotpotQA dev questions 1-100 only.

    A sentence can be picked when it shares at least ``min_term_overlap`` of the query's terms
    (its document's title counting) or its cosine similarity reaches ``min_similarity``. The
    best one is always kept; more follow in score order while the answer stays within
    ``max_words`` words and ``max_sentences`` sentences, so one sentence that carries the
    answer beats several that merely share its words. A sentence that opens with a pronoun
    ("It is often described as...") brings the sentence before it along, or is skipped when
    that one does not fit. No model generates text: every word of the answer is evidence, and
    each run of sentences from one document cites that document.
    """

    weights: dict[str, float] = {  # fitted on HotpotQA dev questions 1-100 (coordinate ascent)
        "similarity": 0.3,
        "coverage": 1.0,
        "titled_coverage": 0.5,
        "resolved_coverage": 0.25,
        "document_coverage": 0.3,
        "document_similarity": 0.1,
        "neighbour_similarity": 0.1,
        "continued": 0.3,
        "rank": 0.0,  # ties go to the better fused rank
        "first": 0.1,
        "offers_answer": 0.1,
        "title_in_query": 0.0,
        "bridge": 0.1,
        "anaphor": 0.0,
        "long": -0.1,
        "follows": 0.0,
    }

    def __init__(
        self,
        max_sentences: int = 3,
        min_term_overlap: float = 0.25,
        embeddings: Callable[[], Any] | None = None,
        min_similarity: float = 0.3,
        sentence_cache_size: int = 20_000,
        max_words: int = 60,
    ):
        self.max_sentences = max_sentences
        self.min_term_overlap = min_term_overlap
        self.embeddings = embeddings
        self.min_similarity = min_similarity
        self.sentence_cache_size = sentence_cache_size
        self.max_words = max_words
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

    def _sentences(self, query: str, documents: Sequence[Mapping[str, Any]]) -> list[_Sentence]:
        """Every sentence of the documents with its features (see the class docstring)."""
        query_terms = set(analyze(query))
        query_words = {w.lower() for w in _WORD.findall(query)}
        lowered_query = " ".join(query.lower().split())
        kind = answer_kind(query)
        raw: list[tuple[int, int, str, set[str], str, set[str]]] = []
        for number, doc in enumerate(documents, start=1):
            title = document_title(doc)
            title_terms = set(analyze(title))
            sentences = split_sentences(doc["content"])
            if sentences and title and sentences[0].lstrip("#").strip() == title:
                sentences = sentences[1:]  # a long title line is not a sentence of the text
            for position, sentence in enumerate(sentences):
                raw.append((number, position, sentence, set(analyze(sentence)), title, title_terms))
        if not raw:
            return []
        similarities = [max(s, 0.0) for s in self._similarities(query, [r[2] for r in raw])]
        df = Counter(term for r in raw for term in r[3] & query_terms)
        idf = {t: math.log(1 + len(raw) / (df[t] or 1)) for t in query_terms}
        total_idf = sum(idf.values()) or 1.0
        needed = max(1, math.ceil(self.min_term_overlap * len(query_terms)))
        document_terms: dict[int, set[str]] = {}
        best: dict[int, float] = {}
        by_place: dict[tuple[int, int], float] = {}
        refers: dict[tuple[int, int], bool] = {}
        for (number, position, sentence, terms, title, title_terms), similarity in zip(
            raw, similarities, strict=True
        ):
            document_terms.setdefault(number, set(title_terms)).update(terms)
            best[number] = max(best.get(number, 0.0), similarity)
            by_place[number, position] = similarity
            refers[number, position] = opens_with_reference(sentence, title)
        texts = {n: " ".join(doc["content"].lower().split()) for n, doc in enumerate(documents, 1)}
        out = []
        for index, (
            (number, position, sentence, terms, title, title_terms),
            similarity,
        ) in enumerate(zip(raw, similarities, strict=True)):
            titled = (terms | title_terms) & query_terms
            matched = terms & query_terms
            lowered_title = " ".join(title.lower().split())
            named_by_query = bool(lowered_title) and lowered_title in lowered_query
            bridge = (
                bool(lowered_title)
                and not named_by_query
                and any(lowered_title in text for n, text in texts.items() if n != number)
            )
            words = len(sentence.split())
            features = {
                "similarity": similarity,
                "coverage": sum(idf[t] for t in matched) / total_idf,
                "titled_coverage": sum(idf[t] for t in titled) / total_idf,
                # "It was designed by..." is about the document's subject: its title counts
                "resolved_coverage": sum(
                    idf[t] for t in (titled if refers[number, position] else matched)
                )
                / total_idf,
                "document_coverage": sum(idf[t] for t in document_terms[number] & query_terms)
                / total_idf,
                "document_similarity": best[number],
                "neighbour_similarity": max(
                    by_place.get((number, position - 1), 0.0),
                    by_place.get((number, position + 1), 0.0),
                ),
                # what the next sentence says about this one's subject ("It is often...")
                "continued": by_place.get((number, position + 1), 0.0)
                if refers.get((number, position + 1))
                else 0.0,
                "rank": 1 / (1 + 0.1 * (number - 1)),
                "first": float(position == 0),
                "offers_answer": offers_answer(kind, sentence, query_words),
                "title_in_query": float(named_by_query),
                "bridge": float(bridge),
                "anaphor": float(refers[number, position]),
                "long": max(0.0, words - 25) / 25,
            }
            # a sentence that refers back shares the terms of the one before it
            before = raw[index - 1][3] if refers[number, position] and position else set()
            lexical = bool(query_terms) and len(titled | (before & query_terms)) >= needed
            semantic = self.embeddings is not None and similarity >= self.min_similarity
            out.append(_Sentence(number, position, sentence, words, features, lexical or semantic))
        return out

    @staticmethod
    def _antecedent(
        sentence: _Sentence, place: Mapping[tuple[int, int], _Sentence]
    ) -> _Sentence | None:
        """The nearest earlier sentence of the same document that names its own subject."""
        position = sentence.position - 1
        while (candidate := place.get((sentence.number, position))) is not None:
            if not candidate.features["anaphor"]:
                return candidate
            position -= 1
        return None

    def _pick(self, sentences: list[_Sentence], weights: Mapping[str, float]) -> list[_Sentence]:
        """The best sentence, then more in score order within the word and sentence budgets;
        a sentence opening with a pronoun comes after its antecedent or not at all, and one
        that goes on about a picked sentence's subject ("He called three of them...") gains
        ``weights["follows"]``."""
        for sentence in sentences:
            sentence.score = sum(weights.get(k, 0.0) * v for k, v in sentence.features.items())
        place = {(s.number, s.position): s for s in sentences}
        follows = weights.get("follows", 0.0)
        remaining = [s for s in sentences if s.eligible]
        chosen: list[_Sentence] = []
        words = 0

        def priority(sentence: _Sentence) -> tuple[float, int, int]:
            bonus = 0.0
            if chosen and sentence.features["anaphor"]:
                bonus = follows * (self._antecedent(sentence, place) in chosen)
            return (-(sentence.score + bonus), sentence.number, sentence.position)

        while remaining and len(chosen) < self.max_sentences:
            sentence = min(remaining, key=priority)
            remaining.remove(sentence)
            group = [sentence]
            if sentence.features["anaphor"]:
                antecedent = self._antecedent(sentence, place)
                if antecedent is None:
                    continue  # nothing before it says who "it" is
                if antecedent not in chosen:
                    group = [antecedent, sentence]
            size = sum(s.words for s in group if s not in chosen)
            group = [s for s in group if s not in chosen]
            if (
                not group
                or len(chosen) + len(group) > self.max_sentences
                or (chosen and words + size > self.max_words)
            ):
                continue
            chosen.extend(group)
            words += size
        return chosen

    def generate(
        self, query: str, documents: Sequence[Mapping[str, Any]], config=None
    ) -> GeneratedAnswer:
        chosen = self._pick(self._sentences(query, documents), self.weights)
        if not chosen:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        parts: list[str] = []
        for i, sentence in enumerate(chosen):
            parts.append(sentence.text)
            following = chosen[i + 1] if i + 1 < len(chosen) else None
            if following is None or (following.number, following.position) != (
                sentence.number,
                sentence.position + 1,
            ):
                parts[-1] += f" [{sentence.number}]"  # one citation per run of one document
        numbers = list(dict.fromkeys(s.number for s in chosen))
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
