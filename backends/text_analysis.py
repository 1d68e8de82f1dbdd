"""Text analysis: the lexical (BM25) backend's analyzers, and the one sentence splitter that
the dense backend's sentence vectors, ingest's stored sentence vectors and the extractive
generator share (they must cut a chunk into the same sentences for stored vectors to be found).

Two analyzers are available:

``english`` (the default)
    lowercase -> ``\\w+`` tokens -> drop English stopwords (bm25s's bundled list,
    ``bm25s.stopwords.STOPWORDS_EN``, the Lucene/Elasticsearch English set) -> Snowball
    English stemming with PyStemmer.
``plain``
    lowercase -> ``\\w+`` tokens, nothing else. Kept so a benchmark can measure what the
    stopwords and stemming buy.

The index stores the analyzer name it was built with; queries must go through the same
analyzer, so always use :func:`get_analyzer` with the stored name rather than picking one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Literal, get_args

import bm25s.stopwords
import Stemmer

# a sentence ends at . ! or ? followed by a space and a capital, a digit or an opening mark
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
LIST_MARKER = re.compile(r"^[-*\u2022]\s+")
# A full stop that ends an abbreviation ends no sentence: an initialism ("the U.S. Army", "KKR &
# Co. L.P."), a title before a name ("Dr.", "St. Augustine"), a company suffix, "v." of a case
# name ("Rostker v. Goldberg"), "No." before a number, or a middle initial ("John F. Kennedy":
# one capital after a capitalised word or another initial; "the language B. Writing..." ends
# a sentence). Cutting there leaves two fragments that each say less than the sentence: the
# answer's name is torn from what is said about it.
ABBREVIATION = re.compile(
    r"(?:^|[\s(\[\"'])(?:(?:[A-Za-z]\.){2,}|"
    r"(?:Mr|Mrs|Ms|Dr|Prof|Rev|Hon|Sr|Jr|St|Mt|Ft|Gen|Col|Lt|Capt|Sgt|Maj|Adm|Gov|Sen|Rep|"
    r"Pres|Co|Corp|Inc|Ltd|Bros|No|Nos|Vol|vs|v|Jan|Feb|Mar|Apr|Aug|Sept?|Oct|Nov|Dec)\.)$"
)
INITIAL = re.compile(r"(?:^|(?:^|\s)[(\[\"']?(?:[A-Z][\w'\u2019-]*|[A-Z]\.)\s+)[A-Z]\.$")


def split_sentences(text: str) -> list[str]:
    """The sentences of a chunk: every line's sentences; markdown headings and short lines
    without closing punctuation (a title, a label) are not sentences, and a list marker is not
    part of one. A stop after an abbreviation (``ABBREVIATION``) or an initial
    (``INITIAL``) does not end a sentence."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = LIST_MARKER.sub("", line)
        if len(line.split()) < 5 and not line.endswith((".", "!", "?")):
            continue  # a title or label line, not a sentence
        parts: list[str] = []
        for part in SENTENCE_END.split(line):
            if parts and (ABBREVIATION.search(parts[-1]) or INITIAL.search(parts[-1])):
                parts[-1] = f"{parts[-1]} {part}"  # the stop ended an abbreviation
            else:
                parts.append(part)
        sentences.extend(part.strip() for part in parts if part.strip())
    return sentences


AnalyzerName = Literal["english", "plain"]
"""Names of the available analyzers."""

ANALYZER_NAMES: tuple[str, ...] = get_args(AnalyzerName)
DEFAULT_ANALYZER: AnalyzerName = "english"

TOKEN_PATTERN = re.compile(r"\w+")
"""Unicode word characters; lowercasing happens before matching."""

ENGLISH_STOPWORDS: frozenset[str] = frozenset(bm25s.stopwords.STOPWORDS_EN)

_TERM_CACHE_MAX = 1_000_000
"""Distinct tokens remembered by an analyzer before its token -> term cache is reset."""


class Analyzer:
    """Turns text into index terms. Safe to share between threads."""

    def __init__(self, name: AnalyzerName) -> None:
        if name not in ANALYZER_NAMES:
            raise ValueError(f"unknown analyzer {name!r}; expected one of {ANALYZER_NAMES}")
        self.name: AnalyzerName = name
        self._stem = name == "english"
        self._stopwords: frozenset[str] = ENGLISH_STOPWORDS if self._stem else frozenset()
        # PyStemmer objects are not thread-safe: keep one per thread.
        self._local = threading.local()
        # token -> stem, or "" for a stopword. Stemming dominates analysis time and corpora
        # repeat words a lot; plain dict reads/writes are atomic, so sharing is safe.
        self._terms: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Analyzer({self.name!r})"

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = Stemmer.Stemmer("english")
        return stemmer

    def analyze(self, text: str) -> list[str]:
        """Index terms of one text, in order, duplicates kept (they are term frequencies)."""
        tokens = TOKEN_PATTERN.findall(text.lower())
        if not self._stem:
            return tokens
        terms = self._terms
        try:
            return [term for term in map(terms.__getitem__, tokens) if term]
        except KeyError:
            pass
        # Slow path, without relying on ``terms`` afterwards (another thread may reset it).
        local: dict[str, str] = {}
        unseen: list[str] = []
        for token in set(tokens):
            term = terms.get(token)
            if term is None:
                unseen.append(token)
            else:
                local[token] = term
        stopwords = self._stopwords
        new = {
            token: "" if token in stopwords else stem
            for token, stem in zip(unseen, self._stemmer().stemWords(unseen), strict=True)
        }
        if len(terms) + len(new) > _TERM_CACHE_MAX:
            terms.clear()
        terms.update(new)
        local.update(new)
        return [term for term in map(local.__getitem__, tokens) if term]

    def analyze_batch(self, texts: Iterable[str]) -> list[list[str]]:
        """:meth:`analyze` over many texts."""
        return [self.analyze(text) for text in texts]


_ANALYZERS: dict[str, Analyzer] = {}
_ANALYZERS_LOCK = threading.Lock()


def get_analyzer(name: AnalyzerName = DEFAULT_ANALYZER) -> Analyzer:
    """The shared analyzer instance called ``name``."""
    analyzer = _ANALYZERS.get(name)
    if analyzer is None:
        with _ANALYZERS_LOCK:
            analyzer = _ANALYZERS.get(name)
            if analyzer is None:
                analyzer = _ANALYZERS[name] = Analyzer(name)
    return analyzer


def analyze(text: str, analyzer: AnalyzerName = DEFAULT_ANALYZER) -> list[str]:
    """Index terms of ``text`` with the named analyzer (English Snowball by default)."""
    return get_analyzer(analyzer).analyze(text)


def analyze_batch(
    texts: Iterable[str], analyzer: AnalyzerName = DEFAULT_ANALYZER
) -> list[list[str]]:
    """Index terms of each text with the named analyzer (English Snowball by default)."""
    return get_analyzer(analyzer).analyze_batch(texts)
