"""Text analysis: the lexical (BM25) backend's analyzers. (The sentence splitter the extractive
generator, ingest's stored sentence vectors and the dense store's sentence shard share lives
with the generator: ``nodes/generate/sentences.py``.)

Two analyzers are available:

``english`` (the default)
    lowercase -> ``\\w+`` tokens -> drop English stopwords (the Lucene/Elasticsearch English
    set: bm25s's bundled ``bm25s.stopwords.STOPWORDS_EN``, written out here because importing
    bm25s imports numpy and scipy; a test keeps the two equal) -> Snowball
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

import Stemmer

AnalyzerName = Literal["english", "plain"]
"""Names of the available analyzers."""

ANALYZER_NAMES: tuple[str, ...] = get_args(AnalyzerName)
DEFAULT_ANALYZER: AnalyzerName = "english"

TOKEN_PATTERN = re.compile(r"\w+")
"""Unicode word characters; lowercasing happens before matching."""

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

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
