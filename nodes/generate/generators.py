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
from bm25s.stopwords import STOPWORDS_EN_PLUS
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from parallel_rag.backends.text_analysis import analyze, split_sentences
from parallel_rag.nodes import prompts

InjectionMode = Literal["tool_role", "system_prompt"]
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
    r"|\bwhat (?:is the )?(?:population|number|percentage|age|size|length|height|value)\b",
    re.IGNORECASE,
)
_MANNER_QUESTION = re.compile(r"\s*(?:how|why)\b", re.IGNORECASE)  # after the quantities
_WORD = re.compile(r"\w+")
_DEFINITE = re.compile(r"^The (\w+)\b")
_NOT_A_NAME = frozenset({"the", "a", "an", "in", "on", "at", "it", "he", "she", "they", "this"})


def answer_kind(query: str) -> Literal["date", "number", "name", "manner"]:
    """What the question asks for: a date ("when", "what year"), a quantity ("how many"), a
    manner or reason ("how does...?", "why...?", which no single name answers) or, by default,
    a name (who, which, what...)."""
    if _DATE_QUESTION.search(query):
        return "date"
    if _NUMBER_QUESTION.search(query):
        return "number"
    if _MANNER_QUESTION.match(query):
        return "manner"
    return "name"


_FOCUS_WH = re.compile(r"\b(?:which|what)\s+(.*)", re.IGNORECASE | re.DOTALL)
_FOCUS_TOKEN = re.compile(r"[\w'\u2019-]+|[^\w\s]")
_FOCUS_END = frozenset(
    "a an the of in on at to for from by with as and or but is was are were be been being do "
    "does did has have had can could will would should may might must that which who whom whose "
    "where when what how why this these those it its his her their he she they there than into "
    "about after before during also not no whether you your we our i".split()
)
_COPULA = frozenset({"is", "was", "are", "were"})
_TYPE_WORDS = frozenset({"name", "names", "type", "kind", "sort"})


def question_focus(query: str) -> str:
    """The noun a "which/what <noun>" question asks for an instance of: "Which algorithm did
    Ada Lovelace publish...?" -> "algorithm", "In what city...?" -> "city", "What is the name
    of the fight song of...?" -> "fight song", "What type of forum...?" -> "forum"; empty when
    the question names none ("Who...?", "What is PForDelta?", "What did she write?")."""
    match = _FOCUS_WH.search(query)
    if not match:
        return ""
    words = _FOCUS_TOKEN.findall(match.group(1))
    lowered = [w.lower() for w in words]
    start = 0
    if lowered[:1] and lowered[0] in _COPULA:  # only "what is the name/type of the <noun>"
        if lowered[1:2] != ["the"] or lowered[2:3] == [] or lowered[2] not in _TYPE_WORDS:
            return ""
        start = 3
    elif lowered[:1] and lowered[0] in _TYPE_WORDS and lowered[1:2] == ["of"]:
        start = 1
    if lowered[start : start + 1] == ["of"]:
        start += 1
    while start < len(words) and lowered[start] in {"the", "a", "an"}:
        start += 1
    focus: list[str] = []
    for word, low in zip(words[start:], lowered[start:], strict=True):
        if low in _FOCUS_END or not word[0].isalnum() or len(focus) == 4:
            break
        focus.append(word)
    return " ".join(focus)


def offers_answer(kind: str, sentence: str, query_words: set[str]) -> float:
    """How much of the asked-for kind the sentence brings that the question does not already
    say: a year or month for a date, a number for a quantity, capitalised words otherwise
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
    if title and sentence.startswith(title):
        return False  # "Their Lives: The Women Targeted by..." names itself
    if _ANAPHOR.match(sentence):
        return True
    definite = _DEFINITE.match(sentence)
    title_words = {w.lower() for w in _WORD.findall(title)}
    return bool(definite) and definite.group(1).lower() in title_words and title not in sentence


_OPENERS = {"(": ")", "[": "]"}
_DASHES = "\u2013\u2014"
ELISION = "\u2026"
"""Stands where a trimmed sentence lost a clause or a parenthesis ("Sela Ward … is an actress")."""


def clause_pieces(sentence: str) -> list[tuple[str, bool]]:
    """The sentence cut at its top-level clause marks: each piece with whether it is a
    parenthesis ("(born 11 July 1956)", "[1]"); the others end at a comma or semicolon followed
    by a space, or before a spaced dash. Joined, the pieces are the sentence."""
    pieces: list[tuple[str, bool]] = []
    start = 0
    closers: list[str] = []
    for i, char in enumerate(sentence):
        spaced = sentence[i + 1 : i + 2] == " "
        if char in _OPENERS:
            if not closers and sentence[start:i].strip():
                pieces.append((sentence[start:i], False))
                start = i
            elif not closers:
                start = i
            closers.append(_OPENERS[char])
        elif closers and char == closers[-1]:
            closers.pop()
            if not closers:
                pieces.append((sentence[start : i + 1], True))
                start = i + 1
        elif closers:
            continue
        elif char in ",;" and spaced:
            pieces.append((sentence[start : i + 1], False))
            start = i + 1
        elif char in _DASHES and spaced and sentence[i - 1 : i] == " ":
            pieces.append((sentence[start:i], False))
            start = i
    if sentence[start:].strip():
        pieces.append((sentence[start:], bool(closers)))
    return pieces


def _carries(
    piece: str, parenthesis: bool, kind: str, query_terms: set[str], query_words: set[str]
) -> bool:
    """Whether a piece of a sentence holds a term of the query or a candidate of the asked
    kind: a year or month for a date, a number (not a year) for a quantity, a capitalised
    word the question does not say for a name (in a clause; a parenthesis with only names is
    mostly an alias, a birthplace or a pronunciation)."""
    if set(analyze(piece)) & query_terms:
        return True
    if kind == "manner":
        return False
    if kind == "name":
        return not parenthesis and offers_answer(kind, piece, query_words) > 0
    if kind == "number":  # a parenthesis' numbers are mostly dates of birth and death
        if parenthesis:
            return False
        years = {m.lower() for m in _YEAR.findall(piece)}
        found = {m.lower().strip(".,") for m in _NUMBER.findall(piece)} - years
        return any(m not in query_words for m in found)
    return offers_answer(kind, piece, query_words) > 0


def _worth_cutting(keep: list[bool], words: list[int], min_saving: int) -> list[bool]:
    """``keep`` with every run of cut pieces given back whose cut would save fewer than
    ``min_saving`` words (the ``ELISION`` that marks it counts as one)."""
    keep = list(keep)
    start = 0
    while start < len(keep):
        end = start
        while end < len(keep) and not keep[end]:
            end += 1
        if end > start and sum(words[start:end]) - 1 < min_saving:
            keep[start:end] = [True] * (end - start)
        start = end + 1
    return keep


def _trim_items(
    parenthesis: str, kind: str, query_terms: set[str], query_words: set[str], min_saving: int
) -> str:
    """A parenthesis without its semicolon-separated items that carry nothing (``_carries``),
    each cut run marked by ``ELISION``. For a "when" question, "(Russian: ..., "Grazhdanskaya
    voyna v Rossiyi"; November 1917 - October 1922)" keeps only its dates: kept whole, that
    parenthesis made the sentence too long to join the answer. Runs saving fewer than
    ``min_saving`` words stay, and so does a parenthesis none of whose items carries or
    one that holds another."""
    body = parenthesis.strip()
    inner = body[1:-1]
    if len(body) < 2 or _OPENERS.get(body[0]) != body[-1] or ";" not in inner:
        return parenthesis  # not one closed parenthesis, or no items
    if any(mark in inner for mark in "()[]"):
        return parenthesis  # nested: a semicolon may belong to the inner one
    items = [item.strip() for item in inner.split(";")]
    carries = [_carries(item, True, kind, query_terms, query_words) for item in items]
    if not any(carries):
        return parenthesis
    keep = _worth_cutting(carries, [len(item.split()) for item in items], min_saving)
    if all(keep):
        return parenthesis
    # each run of cut items becomes one mark
    out = [
        item if kept else ELISION
        for i, (item, kept) in enumerate(zip(items, keep, strict=True))
        if kept or i == 0 or keep[i - 1]
    ]
    lead = parenthesis[: len(parenthesis) - len(parenthesis.lstrip())]
    return f"{lead}{body[0]}{'; '.join(out)}{body[-1]}"


def trim_sentence(
    sentence: str,
    kind: str,
    query_terms: set[str],
    query_words: set[str],
    min_saving: int = 3,
) -> str:
    """The sentence without the clauses and parentheses that carry neither a term of the query
    nor a candidate of the asked kind (``_carries``), each cut run marked by ``ELISION``. The
    opening clause (the sentence's subject and verb) always stays, and a run is only cut when
    that saves at least ``min_saving`` words (the mark counts as one), so short list items and
    place names ("Fairfax County, Virginia") stay whole. A parenthesis that stays loses, by
    the same rules, the items between its semicolons that carry nothing (``_trim_items``)."""
    pieces = clause_pieces(sentence)
    if len(pieces) < 2:
        return sentence
    keep = [
        _carries(text, parenthesis, kind, query_terms, query_words) for text, parenthesis in pieces
    ]
    # the opening clause stays, across a parenthesis ("Roald Dahl (…) was a British novelist,")
    opening = next((i for i, (_, parenthesis) in enumerate(pieces) if i and not parenthesis), 0)
    keep[0] = True
    if pieces[1][1]:
        keep[opening] = True
    keep = _worth_cutting(keep, [len(text.split()) for text, _ in pieces], min_saving)
    pieces = [
        (
            _trim_items(text, kind, query_terms, query_words, min_saving)
            if parenthesis and kept
            else text,
            parenthesis,
        )
        for (text, parenthesis), kept in zip(pieces, keep, strict=True)
    ]
    if all(keep):
        return "".join(text for text, _ in pieces)
    out = ""
    cut_before = [False] + [not kept for kept in keep[:-1]]
    for (text, _), kept, cut in zip(pieces, keep, cut_before, strict=True):
        if kept:  # the piece exactly as written; only the spaces around a mark change
            out = f"{out.rstrip()} {ELISION} {text.lstrip()}" if cut else out + text
    if not keep[-1]:
        out = f"{out.rstrip().rstrip(',;' + _DASHES).rstrip()} {ELISION}"
    return out.strip()


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
    title: str = ""  # its document's title: the label of a sentence quoted without its antecedent
    score: float = 0.0
    shown: str = ""  # what the answer quotes: the text without the pieces that carry nothing
    offers: bool = True  # names something of the asked kind beyond the question (see _pick)
    vector: np.ndarray | None = None  # the embedding model's, when there is one
    named_as: str = ""  # the title it is quoted after: its subject under another name
    # the query terms it carries with its title, each with its IDF: what it adds to the picks
    carried: dict[str, float] = field(default_factory=dict)
    subject: str = ""  # its document's title, lower case, without a disambiguation
    named_by_pick: bool = False  # a sentence picked before it names its document


_FUNCTION_WORDS = frozenset(STOPWORDS_EN_PLUS)  # NLTK's English list, as bm25s bundles it
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")  # "Kiss and Tell (1945 film)"
_BM25_K1 = 1.2
_BM25_B = 0.75


def _cosines(vectors: np.ndarray, vector: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(vector)
    return vectors @ vector / np.where(norms == 0, 1, norms)


class ExtractiveGenerator:
    """Picks the evidence sentences that answer the query and cites each one.

    Every sentence of the fused documents gets a score from eight features, each in 0..1:

    * ``similarity``: the embedding model's cosine with the query, over the best one's;
    * ``bm25``: BM25 of the query over the sentence with its document's title (whose subject
      "It" or "She" usually stands for; IDF from the candidate sentences), over the best one's;
    * ``rank``: the fused rank, as the geometric mean of 1/rank of the sentence's chunk and of
      the best-ranked chunk of its document (same source and title): the opening chunk of a
      document whose later chunk ranks first ("Zipf's law is ... inversely proportional to
      its rank") is as much about the question as that chunk; a document that is one chunk
      keeps 1/rank;
    * ``first``: the sentence opens its text (the first sentence of an article defines its
      subject, which is often the answer's entity; a later chunk's first sentence does not);
    * ``offers_answer``: it brings what the question asks for (a date for "when", a number for
      "how many", a name otherwise) beyond the question's own words;
    * ``title_in_query``: the question names the document's title;
    * ``bridge``: the document is the second hop of a two-step question: the question does
      not name its title, but a document the question names (or a top-three one) does;
    * ``continued``: the next sentence refers back to this one ("It is often described as...")
      and is similar to the query: what is said about a sentence's subject counts for it.

    The first seven weights are a logistic regression of "the sentence holds a gold answer" on
    those features (C 0.1, L2) fitted on HotpotQA dev questions 1-100 only (five-fold
    cross-validation there gave the same answer recall as the fit); ``continued`` was set by
    hand on the same questions and the example questions.

    A sentence can be picked when it shares at least ``min_term_overlap`` of the query's terms
    (its document's title counting) or its cosine similarity reaches ``min_similarity``. The
    best one is always kept; more follow in score order while the answer stays within
    ``max_words`` words and ``max_sentences`` sentences. A sentence that opens with a
    reference ("It was designed by...") brings the sentence that names its subject when that
    fits; otherwise, it is quoted after its document's title ("Millau Viaduct: It was
    designed by..."), or skipped when the document has none.

    A sentence is quoted without the clauses and parentheses that carry neither a term of the
    query nor a candidate of the asked kind (``trim_sentence``: dates of birth, pronunciations,
    appositives), each cut marked with ``ELISION``; the word budget counts what is quoted, so
    the room the cuts free goes to the next sentence. No model generates text: every word of
    the answer is evidence, in its order (or a document title), and each run of sentences from
    one document cites that document.

    When the question asks for a name, a document's opening sentence that does not spell its
    title (without a trailing disambiguation: "Kiss and Tell (1945 film)") is quoted after it
    ("Leo Varadkar: Leo Eric Varadkar ... is an Irish Fine Gael politician ..."): the subject
    an article opens with is often the answer, under its full or native name, and the title
    is the name it goes by (the words count against ``max_words``; ``name_by_title`` False
    turns it off). Not when the question names the title: it is the question's topic then.
    On HotpotQA dev questions 1-100 it put the answer's common name into 5 answers that
    quoted its entity under another (recall 0.58 -> 0.63, median words unchanged).

    The chosen sentences are quoted with the one most likely to carry the answer first
    (``_arrange``): a question's own topic can fill the best-scored sentence ("In 1842 ...
    Menabrea published a paper ... describing the Analytical Engine") while the answer is in
    another that is an instance of what the question asks for ("Which algorithm...?": "Note G
    set out a step-by-step method ...").
    """

    follow_up_weights: dict[str, float] = {  # set on HotpotQA dev questions 1-100
        "named_by_pick": 1.0,
        "uncovered": 1.0,
    }
    """Added to a sentence's score for every pick after the first (see ``_pick``):

    * ``named_by_pick``: a sentence already picked from another document names this one's
      document (its title, not named by the question): the second hop of a two-step question
      ("...formed in the city of Strasbourg" -> the Strasbourg article), whose sentences that
      carry a query term no pick does become candidates even when they share too little of
      the question to be eligible ("Strasbourg had 276,170 inhabitants");
    * ``uncovered``: the IDF-weighted query terms (function words aside) this sentence
      carries that no picked one does, over the best remaining sentence's: the part of the
      question still unanswered ("...has won how many tournaments worldwide?" once the record
      holder is named).

    On questions 1-100 answer recall was flat (0.64-0.66, from 0.63) for ``named_by_pick``
    0.5-1.5 and ``uncovered`` 1.0-1.5; 1.0 each is the middle of that plateau."""

    weights: dict[str, float] = {  # logistic regression on HotpotQA dev questions 1-100
        "similarity": 0.5,
        "bm25": 1.6,
        "rank": 0.8,
        "first": 0.7,
        "offers_answer": 0.8,
        "title_in_query": 0.2,
        "bridge": 1.1,
        "continued": 1.0,  # set by hand, not fitted
    }

    def __init__(
        self,
        max_sentences: int = 3,
        min_term_overlap: float = 0.25,
        embeddings: Callable[[], Any] | None = None,
        min_similarity: float = 0.3,
        sentence_cache_size: int = 20_000,
        max_words: int = 64,
        focus_weight: float = 3.0,
        name_by_title: bool = True,
    ):
        self.name_by_title = name_by_title
        self.max_sentences = max_sentences
        self.min_term_overlap = min_term_overlap
        self.embeddings = embeddings
        self.min_similarity = min_similarity
        self.sentence_cache_size = sentence_cache_size
        self.max_words = max_words
        self.focus_weight = focus_weight
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

    def _similarities(
        self, query: str, sentences: list[str]
    ) -> tuple[list[float], np.ndarray | None]:
        """Each sentence's cosine with the query, and the sentences' vectors (none without a
        model)."""
        if self.embeddings is None or not sentences:
            return [0.0] * len(sentences), None
        model = self.embeddings()
        query_vector = np.asarray(model.embed_query(query), dtype=np.float32)
        vectors = self._sentence_matrix(model, sentences)
        return _cosines(vectors, query_vector).tolist(), vectors

    def _sentences(self, query: str, documents: Sequence[Mapping[str, Any]]) -> list[_Sentence]:
        """Every sentence of the documents with its features (see the class docstring)."""
        query_terms = set(analyze(query))
        query_words = {w.lower() for w in _WORD.findall(query)}
        lowered_query = " ".join(query.lower().split())
        kind = answer_kind(query)
        raw: list[tuple[int, int, str, list[str], str, list[str]]] = []
        titles: dict[int, str] = {}
        opens: dict[int, bool] = {}  # the document is the start of its text, not a later chunk
        rank: dict[int, float] = {}  # the chunk's and its document's best chunk's, combined
        best_chunk: dict[tuple[str, str], int] = {}
        for number, doc in enumerate(documents, start=1):
            title = titles[number] = document_title(doc)
            metadata = doc.get("metadata") or {}
            opens[number] = not metadata.get("chunk_index")
            source = metadata.get("source")
            best = best_chunk.setdefault((str(source), title), number) if source else number
            rank[number] = 1 / math.sqrt(number * best)
            title_terms = analyze(title)
            sentences = split_sentences(doc["content"])
            if sentences and title and sentences[0].lstrip("#").strip() == title:
                sentences = sentences[1:]  # a long title line is not a sentence of the text
            for position, sentence in enumerate(sentences):
                raw.append((number, position, sentence, analyze(sentence), title, title_terms))
        if not raw:
            return []
        cosines, vectors = self._similarities(query, [r[2] for r in raw])
        similarities = [max(s, 0.0) for s in cosines]
        # BM25 of the query over each sentence with its title, the candidates as the collection
        df = Counter(t for r in raw for t in set(r[3]) | set(r[5]) if t in query_terms)
        count = len(raw)
        idf = {t: math.log(1 + (count - df[t] + 0.5) / (df[t] + 0.5)) for t in query_terms}
        average = sum(len(r[3]) + len(r[5]) for r in raw) / count or 1.0

        def bm25(terms: list[str]) -> float:
            frequency = Counter(terms)
            norm = _BM25_K1 * (1 - _BM25_B + _BM25_B * len(terms) / average)
            return sum(
                idf[t] * frequency[t] * (_BM25_K1 + 1) / (frequency[t] + norm)
                for t in query_terms
                if frequency[t]
            )

        lexical_scores = [bm25(r[3] + r[5]) for r in raw]
        top_similarity = max(similarities) or 1.0
        top_lexical = max(lexical_scores) or 1.0
        texts = {n: " ".join(doc["content"].lower().split()) for n, doc in enumerate(documents, 1)}
        lowered_titles = {n: " ".join(t.lower().split()) for n, t in titles.items()}
        named = {n: bool(t) and t in lowered_query for n, t in lowered_titles.items()}
        bridge = {
            n: bool(t)
            and not named[n]
            and any(t in texts[m] for m in texts if lowered_titles[m] != t and (named[m] or m <= 3))
            for n, t in lowered_titles.items()
        }
        # the question's own words ("why", "do", "so") are no part of it a sentence can answer
        content_terms = set(analyze(" ".join(query_words - _FUNCTION_WORDS)))
        cores = {n: _DISAMBIGUATION.sub("", t).strip() for n, t in lowered_titles.items()}
        # a title a picked sentence can name: one the question does not, and not a mere word
        subjects = {n: c if len(c) > 3 and c not in lowered_query else "" for n, c in cores.items()}
        needed = max(1, math.ceil(self.min_term_overlap * len(query_terms)))
        refers = [opens_with_reference(r[2], r[4]) for r in raw]
        out = []
        for index, (number, position, sentence, terms, title, title_terms) in enumerate(raw):
            similarity = similarities[index]
            features = {
                "similarity": similarity / top_similarity,
                "bm25": lexical_scores[index] / top_lexical,
                "rank": rank[number],
                "first": float(position == 0 and opens[number]),
                "offers_answer": offers_answer(kind, sentence, query_words),
                "title_in_query": float(named[number]),
                "bridge": float(bridge[number]),
                # what the next sentence says about this one's subject ("It is often...")
                "continued": similarities[index + 1] / top_similarity
                if index + 1 < len(raw) and raw[index + 1][0] == number and refers[index + 1]
                else 0.0,
                "anaphor": float(refers[index]),  # not scored: decides how it is quoted
            }
            titled = (set(terms) | set(title_terms)) & query_terms
            # a sentence that refers back shares the terms of the one before it
            before = set(raw[index - 1][3]) if refers[index] and position else set()
            lexical = bool(query_terms) and len(titled | (before & query_terms)) >= needed
            semantic = self.embeddings is not None and similarity >= self.min_similarity
            eligible = lexical or semantic
            shown = (
                trim_sentence(sentence, kind, query_terms, query_words) if eligible else sentence
            )
            carried = {t: idf[t] for t in titled if t in content_terms}
            named_as = ""
            if (
                self.name_by_title
                and kind == "name"
                and position == 0
                and opens[number]
                and not named[number]
                and not refers[index]
            ):
                core = _DISAMBIGUATION.sub("", title).strip()
                if core and core.lower() not in " ".join(shown.lower().split()):
                    named_as = core
            # a capitalised first word ("Where the pattern demanded it...") names nothing
            after_first = sentence.split(None, 1)[1:]
            offers = bool(after_first) and offers_answer(kind, after_first[0], query_words) > 0
            out.append(
                _Sentence(
                    number,
                    position,
                    sentence,
                    len(shown.split()) + len(named_as.split()),
                    features,
                    eligible,
                    title,
                    shown=shown,
                    offers=offers,
                    named_as=named_as,
                    vector=None if vectors is None else vectors[index],
                    carried=carried,
                    subject=subjects[number],
                )
            )
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

    def _pick(
        self, sentences: list[_Sentence], weights: Mapping[str, float]
    ) -> tuple[list[_Sentence], set[int]]:
        """The best sentence, then more in score order within the word and sentence budgets,
        so one sentence that carries the answer beats several that merely share its words.
        A sentence opening with a reference
        comes after its antecedent when that fits, else labelled with its document's title,
        else not at all. A sentence that names nothing of the asked kind beyond the question
        ("Mendeleev left gaps and predicted that unknown elements would be found") brings the
        next sentence of its document when that one refers back to it and does ("He called
        three of them eka-aluminium, eka-boron and eka-silicon"), if both fit. After each pick
        the rest are ranked again with ``follow_up_weights``: what the picks leave open counts
        from the second pick on. Returns the sentences in choice order and the ids of the
        labelled ones."""
        for sentence in sentences:
            sentence.score = sum(weights.get(k, 0.0) * v for k, v in sentence.features.items())
        base = {id(s): s.score for s in sentences}
        place = {(s.number, s.position): s for s in sentences}
        eligible = [s for s in sentences if s.eligible]
        chosen: list[_Sentence] = []
        labelled: set[int] = set()
        words = 0

        def add(sentence: _Sentence) -> bool:
            nonlocal words
            if sentence in chosen:
                return False
            group, size, label = [sentence], sentence.words, False
            following = place.get((sentence.number, sentence.position + 1))
            if (
                not sentence.offers
                and not sentence.features["anaphor"]
                and following is not None
                and following.offers
                and following.features["anaphor"]
                and following not in chosen
                and len(chosen) + 2 <= self.max_sentences
                and words + size + following.words <= self.max_words
            ):  # what the sentence leaves open, its continuation names
                group, size = [sentence, following], size + following.words
            if sentence.features["anaphor"]:
                antecedent = self._antecedent(sentence, place)
                fits = antecedent is not None and (
                    antecedent in chosen
                    or (
                        len(chosen) + 2 <= self.max_sentences
                        and words + size + antecedent.words <= self.max_words
                    )
                )
                if fits and antecedent not in chosen:
                    group, size = [antecedent, sentence], size + antecedent.words
                elif not fits and sentence.title:
                    label, size = True, size + len(sentence.title.split())
                elif not fits and antecedent is not None and not chosen:
                    # the best sentence is always kept, with what names its subject
                    group, size = [antecedent, sentence], size + antecedent.words
                elif not fits:
                    return False  # nothing says who "it" is
            if len(chosen) + len(group) > self.max_sentences or (
                chosen and words + size > self.max_words
            ):
                return False
            chosen.extend(group)
            words += size
            if label:
                labelled.add(id(sentence))
            return True

        while len(chosen) < self.max_sentences:
            if chosen:
                eligible += self._follow_up(sentences, chosen, base)
            ranked = sorted(
                (s for s in eligible if s not in chosen),
                key=lambda s: (-s.score, s.number, s.position),
            )
            if not any(add(sentence) for sentence in ranked):
                break
        # what a sentence scores as an answer (the order ``_arrange`` quotes in): its own
        # score, and the second hop's weight; covering what the picks left open is not
        # answering it (with that too, a question's other half came first: 0.49 of 1-100
        # answers opened with a gold answer, against 0.51)
        named = self.follow_up_weights.get("named_by_pick", 0.0)
        for sentence in sentences:
            sentence.score = base[id(sentence)] + named * sentence.named_by_pick
        return chosen, labelled

    def _follow_up(
        self, candidates: list[_Sentence], chosen: list[_Sentence], base: Mapping[int, float]
    ) -> list[_Sentence]:
        """Score the candidates not chosen yet as their base score plus what they add to the
        picks (``follow_up_weights``); a chosen sentence keeps the score it was chosen at.
        Returns the sentences that become eligible now: those of a document a pick names
        that carry a query term no pick does, however little of the question they share."""
        covered = {t for c in chosen for t in c.carried}
        picked = [(c.number, " ".join(c.text.lower().split())) for c in chosen]
        rest = [s for s in candidates if s not in chosen]
        uncovered = {id(s): sum(v for t, v in s.carried.items() if t not in covered) for s in rest}
        top = max(uncovered.values(), default=0.0) or 1.0
        weight = self.follow_up_weights
        followed = []
        for s in rest:
            named = s.named_by_pick = bool(s.subject) and any(
                n != s.number and s.subject in text for n, text in picked
            )
            s.score = (
                base[id(s)]
                + weight.get("named_by_pick", 0.0) * named
                + weight.get("uncovered", 0.0) * uncovered[id(s)] / top
            )
            if named and weight.get("named_by_pick", 0.0) and uncovered[id(s)] and not s.eligible:
                # the second hop's sentence need not share the first hop's words
                s.eligible = True
                followed.append(s)
        return followed

    def _arrange(
        self,
        focus: str,
        sentences: list[_Sentence],
        chosen: list[_Sentence],
        labelled: set[int],
    ) -> list[_Sentence]:
        """The chosen sentences in the order the answer quotes them: runs that read together
        stay together in document order (a sentence after the one it refers back to or
        follows), and the runs go by the likelihood that they carry the answer: the score
        plus ``focus_weight`` times the cosine of the sentence with ``focus``, the noun a
        "which/what <noun>" question asks for (``question_focus``; over the best sentence's),
        so "Note G set out a step-by-step method..." opens the answer to "Which algorithm did
        Ada Lovelace publish...?" before the paper that named the engine. On HotpotQA dev
        questions 1-100 a gold answer opens the answer for 0.37 of the questions by score
        alone (0.35 in choice order, before runs were kept together) and 0.39/0.41/0.41 with
        the focus at weights 2/3/4. Leaving the document-picking features (fused rank, title
        named) out of this order reached 0.41-0.44 there but lost the opening answer on
        held-out questions (0.419 -> 0.381 on 101-500): not kept."""
        place = {(s.number, s.position): s for s in sentences}
        runs: list[list[_Sentence]] = []
        run_of: dict[int, int] = {}
        for sentence in chosen:
            home = None
            if sentence.features["anaphor"] and id(sentence) not in labelled:
                antecedent = self._antecedent(sentence, place)
                home = run_of.get(id(antecedent)) if antecedent is not None else None
            if home is None:
                before = place.get((sentence.number, sentence.position - 1))
                home = run_of.get(id(before)) if before is not None else None
            if home is None:
                runs.append([sentence])
                home = len(runs) - 1
            else:
                runs[home].append(sentence)
            run_of[id(sentence)] = home
        if len(runs) < 2:
            return chosen
        for run in runs:
            run.sort(key=lambda s: s.position)
        focus_of = {id(s): 0.0 for s in chosen}
        if focus and all(s.vector is not None for s in sentences):
            focus_vector = np.asarray(self.embeddings().embed_query(focus), dtype=np.float32)
            matrix = np.stack([s.vector for s in sentences])
            cosines = np.maximum(_cosines(matrix, focus_vector), 0.0)
            top = float(cosines.max())
            if top > 0:  # over the best sentence's, as the query similarity is
                best = {id(s): float(c) / top for s, c in zip(sentences, cosines, strict=True)}
                focus_of = {id(s): best[id(s)] for s in chosen}

        def lead(sentence: _Sentence) -> float:
            return sentence.score + self.focus_weight * focus_of[id(sentence)]

        keys = [max(lead(s) for s in run) for run in runs]
        order = sorted(range(len(runs)), key=lambda i: (-keys[i], i))
        return [s for i in order for s in runs[i]]

    def generate(
        self, query: str, documents: Sequence[Mapping[str, Any]], config=None
    ) -> GeneratedAnswer:
        focus = question_focus(query) if self.focus_weight and self.embeddings else ""
        prefetch = getattr(self.embeddings(), "prefetch_query", None) if focus else None
        if prefetch is not None:  # encoded on a spare core while the sentences are scored
            prefetch(focus)
        sentences = self._sentences(query, documents)
        chosen, labelled = self._pick(sentences, self.weights)
        if not chosen:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        chosen = self._arrange(focus, sentences, chosen, labelled)
        parts: list[str] = []
        for i, sentence in enumerate(chosen):
            label = f"{sentence.title}: " if id(sentence) in labelled else ""
            if not label and sentence.named_as:
                label = f"{sentence.named_as}: "
            parts.append(label + (sentence.shown or sentence.text))
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
