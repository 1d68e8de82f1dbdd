"""Query rewriters: a LangChain chat model turned into one or more retrieval query views.

Kinds: ``multi_query`` (alternative phrasings), ``decompose`` (sub-questions) and ``hyde`` (one
hypothetical passage, used only as a dense-retrieval query, never as evidence), plus ``prf``
(pseudo-relevance feedback over the BM25 index: no model; ``PseudoRelevanceRewriter``).
``ChatModelRewriter.run`` takes a ``RewriteRequest`` (query, optional temperature and max_tokens)
and returns a ``RewriteResult`` (``queries``, or HyDE's single ``rewritten_query``).

Parsing is forgiving of what small models really write (SmolLM2 outputs are pinned in the unit
tests): numbering, bullets, markdown emphasis, "Query 1:"-style labels, intro lines ending in a
colon, quotes, blank lines, echoes of the question, duplicates and overlong lines.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from parallel_rag.backends.bm25.analysis import get_analyzer
from parallel_rag.nodes import prompts
from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # the BM25 index code (bm25s, numpy) loads with the bm25 branch it reads
    from parallel_rag.backends.bm25.index import BM25Index

RewriterKind = Literal["multi_query", "decompose", "hyde"]
MAX_VIEW_CHARS = 500
MAX_HYDE_CHARS = 2000

# A numbered/lettered or "Query 1:" marker must be followed by whitespace, so that queries
# starting with "U.S.", "3.5 inch", "2:00 pm" or "Q-learning" keep their first characters.
_LIST_MARKER = re.compile(
    r"^\s*(?:(?:\d+|[a-zA-Z])[.):](?=\s|$)|[-*\u2022>]+"
    r"|(?:query|question|q)\s*\d*\s*[:.)-](?=\s|$))\s*",
    re.I,
)
# Labels small models put before a view: "Rephrased question 2:", "Sub-question:", "Answer:".
_VIEW_LABEL = re.compile(
    r"^\s*(?:(?:alternative|rephrased|reworded|paraphrased|search|simpler|new)\s+)?"
    r"(?:rephrasings?|rephrase|paraphrases?|alternatives?|versions?|variants?|queries|query"
    r"|sub-?questions?|questions?)\s*#?\d*\s*[:.)-](?=\s|$)\s*",
    re.I,
)
_HYDE_LABEL = re.compile(
    r"^\s*(?:hypothetical\s+)?(?:passage|answer|document|paragraph)\s*[:.-](?=\s|$)\s*", re.I
)
# "The answer to this question is: ..." (SmolLM2 opens with it when it answers instead)
_ANSWER_LEAD_IN = re.compile(
    r"^\s*(?:the\s+)?answer(?:\s+to\s+(?:this|the|your)\s+question)?\s+is\s*:\s*", re.I
)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?(?=\s|$)")
_EMPHASIS = re.compile(r"(\*\*|__)(.*?)\1")
# "1. first 2. second 3. third" on one line: split before each later number.
_INLINE_LIST = re.compile(r"^\s*1[.)]\s.*\s2[.)]\s")
_INLINE_NUMBER = re.compile(r"\s+(?=\d{1,2}[.)]\s)")


class EmptyRewriteError(ValueError):
    """The rewriter produced no usable query; handled by the rewriter's ``on_failure``."""


class RewriteRequest(BaseModel):
    """A rewriter request: the question and optional sampling overrides."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=4000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0, le=4096)


class RewriteResult(BaseModel):
    """A rewriter's output: ``queries`` (multi-query, decompose) or one
    ``rewritten_query`` (HyDE's hypothetical passage), never both."""

    model_config = ConfigDict(extra="forbid")

    rewritten_query: str | None = None
    queries: list[str] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> RewriteResult:
        if (self.rewritten_query is None) == (self.queries is None):
            raise ValueError("a RewriteResult has either rewritten_query or queries")
        if self.queries is not None and not self.queries:
            raise ValueError("queries must not be empty")
        return self


def _comparable(text: str) -> str:
    """Case, punctuation and spacing removed: how echoes and duplicates are recognised."""
    kept = "".join(" " if ch in string.punctuation else ch for ch in text.casefold())
    return " ".join(kept.split())


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, ending on a word boundary when there is one."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip()


def _clean_line(line: str) -> str:
    line = _EMPHASIS.sub(r"\2", line)
    for _ in range(2):  # "1. Query 2: ..." carries a marker and a label
        line = _VIEW_LABEL.sub("", _LIST_MARKER.sub("", line))
    line = _ANSWER_LEAD_IN.sub("", line)
    return line.strip().strip("\"'`\u201c\u201d").strip()


def parse_query_lines(text: str, *, original: str, limit: int) -> list[str]:
    """Query strings from a model's list-ish output: markers stripped, echoes and dups dropped."""
    queries: list[str] = []
    seen = {_comparable(original)}
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and _INLINE_LIST.match(lines[0]):
        lines = _INLINE_NUMBER.split(lines[0])
    for line in lines:
        candidate = _clean_line(line)
        if not candidate or candidate.endswith(":") and len(candidate) < 80:
            continue  # blank, or an intro line such as "Here are three rephrasings:"
        candidate = _cut(candidate, MAX_VIEW_CHARS)
        key = _comparable(candidate)
        if not key or key in seen:
            continue
        seen.add(key)
        queries.append(candidate)
        if len(queries) >= limit:
            break
    return queries


def _drop_unfinished_sentence(passage: str) -> str:
    """A passage cut by ``max_tokens`` ends mid-sentence: keep it up to its last full stop."""
    ends = list(_SENTENCE_END.finditer(passage))
    if not ends or ends[-1].end() == len(passage):
        return passage
    return passage[: ends[-1].end()]


def parse_passage(text: str, *, original: str) -> str:
    """HyDE's hypothetical passage: labels, headings and repeated paragraphs dropped (small
    models loop), an unfinished last sentence dropped, bounded to ``MAX_HYDE_CHARS``."""
    lines = [_EMPHASIS.sub(r"\2", line).strip() for line in text.strip().splitlines()]
    paragraphs: list[str] = []
    seen: set[str] = set()
    for line in lines:
        key = _comparable(line)
        if line.startswith("#") or key and key in seen:
            continue
        seen.add(key)
        paragraphs.append(line)
    passage = "\n".join(paragraphs).strip()
    passage = re.sub(r"\n{3,}", "\n\n", passage)
    passage = _ANSWER_LEAD_IN.sub("", _HYDE_LABEL.sub("", passage)).strip()
    passage = passage.strip('"\u201c\u201d').strip()
    if len(passage) > MAX_HYDE_CHARS:
        head = passage[:MAX_HYDE_CHARS]
        passage = _drop_unfinished_sentence(head) if _SENTENCE_END.search(head) else head
    else:
        passage = _drop_unfinished_sentence(passage)
    if _comparable(passage) in {"", _comparable(original)}:
        raise EmptyRewriteError("the HyDE rewriter returned no passage (empty or an echo)")
    return passage


def validate_prompt(template: str) -> str:
    """A rewriter prompt must name ``{query}`` and format with ``query``/``num_queries`` only."""
    if "{query}" not in template:
        raise ValueError("must contain the {query} placeholder")
    try:
        template.format(query="q", num_queries=3)
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            f"only {{query}} and {{num_queries}} may be used; write other braces as {{{{ }}}} "
            f"({type(error).__name__}: {error})"
        ) from None
    return template


class ChatModelRewriter:
    """Rewrites a question with any LangChain chat model; returns (text, kind) views."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        kind: RewriterKind = "multi_query",
        num_queries: int = 3,
        temperature: float | None = None,
        max_tokens: int | None = None,
        prompt: str | None = None,
    ):
        self.model = model
        self.kind = kind
        self.num_queries = num_queries
        self.prompt = validate_prompt(prompt or prompts.REWRITER_PROMPTS[kind])
        self.defaults = {"temperature": temperature, "max_tokens": max_tokens}
        bind = {k: v for k, v in self.defaults.items() if v is not None}
        self.runnable = model.bind(**bind) if bind else model

    def _bound(self, temperature: float | None, max_tokens: int | None):
        if temperature is None and max_tokens is None:
            return self.runnable
        overrides = {"temperature": temperature, "max_tokens": max_tokens}
        merged = {
            key: overrides[key] if overrides[key] is not None else default
            for key, default in self.defaults.items()
        }
        return self.model.bind(**{k: v for k, v in merged.items() if v is not None})

    def messages(self, query: str) -> list[BaseMessage]:
        """The prompt sent to the model (one user message)."""
        return [HumanMessage(self.prompt.format(query=query, num_queries=self.num_queries))]

    def parse(self, query: str, message: Any) -> list[tuple[str, str]]:
        """Views from the model's reply; raises ``EmptyRewriteError`` when none is usable."""
        text = message.text if isinstance(message, BaseMessage) else str(message)
        if self.kind == "hyde":
            return [(parse_passage(text, original=query), "hyde")]
        queries = parse_query_lines(text, original=query, limit=self.num_queries)
        if not queries:
            raise EmptyRewriteError(f"the {self.kind} rewriter returned no usable query")
        return [(q, "rewrite") for q in queries]

    def rewrite(
        self,
        query: str,
        config=None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> list[tuple[str, str]]:
        runnable = self._bound(temperature, max_tokens)
        return self.parse(query, runnable.invoke(self.messages(query), config))

    def _result(self, views: list[tuple[str, str]]) -> RewriteResult:
        if self.kind == "hyde":
            return RewriteResult(rewritten_query=views[0][0])
        return RewriteResult(queries=[text for text, _ in views])

    def run(self, request: RewriteRequest, config=None) -> RewriteResult:
        """``RewriteRequest`` in, ``RewriteResult`` out (the request's sampling overrides apply
        to this call only)."""
        return self._result(
            self.rewrite(
                request.query,
                config,
                temperature=request.temperature,
                max_tokens=request.max_tokens,
            )
        )


class PseudoRelevanceRewriter:
    """RM3-style query expansion from the first-pass BM25 top documents; needs no model.

    The question is scored against the BM25 index; each of the top ``fb_docs`` documents
    (score > 0) gives its terms' relative frequencies, weighted by the document's share of the
    feedback scores (the relevance model RM1). The ``fb_terms`` heaviest terms not already in the
    question are appended to it, giving one ``expansion`` view that reaches lexical branches only
    (terms are index terms, stemmed by the index's analyzer, so they are kept only when analysing
    them again gives them back). BM25 queries here are term sets, so the terms carry no weights:
    the interpolation with the original query happens at fusion, where the original view
    (``include_original``) and the expanded one are fused.
    """

    kind = "prf"

    def __init__(
        self, index: Callable[[], BM25Index], *, fb_docs: int = 10, fb_terms: int = 10
    ) -> None:
        self.index = index
        self.fb_docs = fb_docs
        self.fb_terms = fb_terms

    def expansion_terms(self, query: str) -> list[tuple[str, float]]:
        """The expansion terms with their relevance-model weights, heaviest first."""
        import numpy as np  # with the index, which is built on it

        index = self.index()
        original = set(index.query_terms(query))
        if not original:
            return []
        scores = index.score_all(query)
        order = np.argsort(-scores, kind="stable")[: self.fb_docs]
        feedback = [int(p) for p in order if scores[p] > 0]
        total = float(sum(scores[p] for p in feedback))
        weights: dict[int, float] = {}
        for position in feedback:
            term_ids = index.chunk_term_ids(position)
            if len(term_ids) == 0:
                continue
            ids, counts = np.unique(term_ids, return_counts=True)
            share = float(scores[position]) / total / len(term_ids)
            for term_id, count in zip(ids.tolist(), counts.tolist(), strict=True):
                weights[term_id] = weights.get(term_id, 0.0) + share * count
        vocabulary = index.vocabulary
        analyzer = get_analyzer(index.analyzer)
        ranked = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
        terms: list[tuple[str, float]] = []
        for term_id, weight in ranked:
            term = vocabulary[term_id]
            if term in original or analyzer.analyze(term) != [term]:
                continue
            terms.append((term, weight))
            if len(terms) >= self.fb_terms:
                break
        return terms

    def rewrite(self, query: str, config=None) -> list[tuple[str, str]]:
        terms = self.expansion_terms(query)
        if not terms:
            raise EmptyRewriteError("the prf rewriter found no feedback terms for the query")
        return [(" ".join([query.strip(), *(term for term, _ in terms)]), "expansion")]
