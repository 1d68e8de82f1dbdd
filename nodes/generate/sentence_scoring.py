"""Sentence scoring for the extractive generator (``extractive.py``): every sentence of the
fused documents as a ``CandidateSentence`` with the features its score is made of (see
``ExtractiveGenerator``'s docstring for what each feature means and how the weights were set),
whether it may be picked, and the text the answer would quote.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parallel_rag.backends.bm25.analysis import analyze
from parallel_rag.nodes.generate.function_words import FUNCTION_WORDS as _FUNCTION_WORDS
from parallel_rag.nodes.generate.furniture import Furniture, continues, read_pieces
from parallel_rag.nodes.generate.questions import (
    answer_kind,
    lowered_words,
    offers_answer,
    opens_with_reference,
)
from parallel_rag.nodes.generate.trimming import trim_sentence

if TYPE_CHECKING:  # numpy loads with the first vectors compared, not with the graph
    import numpy as np


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
class CandidateSentence:
    number: int  # the document's evidence number
    position: int  # the sentence's place in that document
    text: str
    words: int
    features: dict[str, float]
    eligible: bool  # shares enough of the query (with its title) or is similar enough
    title: str = ""  # its document's title: the label of a sentence quoted without its antecedent
    score: float = 0.0
    shown: str = ""  # what the answer quotes: the text without the pieces that carry nothing
    offers: bool = True  # names something of the asked kind beyond the question (pick_sentences)
    vector: np.ndarray | None = None  # the embedding model's, when there is one
    named_as: str = ""  # the title it is quoted after: its subject under another name
    # the query terms it carries with its title, each with its IDF: what it adds to the picks
    carried: dict[str, float] = field(default_factory=dict)
    subject: str = ""  # its document's title, lower case, without a disambiguation
    named_by_pick: bool = False  # a sentence picked before it names its document
    wraps: bool = False  # the rest of the sentence before it (that line runs into this one)


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")  # "Kiss and Tell (1945 film)"
_BM25_K1 = 1.2
_BM25_B = 0.75


def cosine_similarities(vectors: np.ndarray, vector: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(vector)
    return vectors @ vector / np.where(norms == 0, 1, norms)


def candidate_sentences(
    query: str,
    documents: Sequence[Mapping[str, Any]],
    similarities_to: Callable[[str, list[str]], tuple[list[float], np.ndarray | None]],
    *,
    has_model: bool,
    min_similarity: float,
    min_term_overlap: float,
    name_by_title: bool,
    drop_furniture: bool,
    join_wrapped_lines: bool,
) -> list[CandidateSentence]:
    """Every sentence of the documents with its features (see ``ExtractiveGenerator``).
    ``similarities_to(query, sentences)`` gives each sentence's cosine with the query and the
    sentences' vectors (none without a model); ``has_model`` says whether there is one, so a
    sentence similar enough (``min_similarity``) may be picked without sharing the query's
    terms; the other settings are the generator's of the same names."""
    """Every sentence of the documents with its features (see the class docstring)."""
    query_terms = set(analyze(query))
    query_words = lowered_words(query)
    lowered_query = " ".join(query.lower().split())
    kind = answer_kind(query)
    raw: list[tuple[int, int, str, list[str], str, list[str]]] = []
    titles: dict[int, str] = {}
    opens: dict[int, bool] = {}  # the document is the start of its text, not a later chunk
    rank: dict[int, float] = {}  # the chunk's and its document's best chunk's, combined
    best_chunk: dict[tuple[str, str], int] = {}
    furniture = Furniture(documents) if drop_furniture else None
    wraps: list[bool] = []  # the sentence is the rest of the one before (a wrapped line)
    for number, doc in enumerate(documents, start=1):
        title = titles[number] = document_title(doc)
        metadata = doc.get("metadata") or {}
        opens[number] = not metadata.get("chunk_index")
        source = metadata.get("source")
        best = best_chunk.setdefault((str(source), title), number) if source else number
        rank[number] = 1 / math.sqrt(number * best)
        title_terms = analyze(title)
        if furniture is not None:  # headings, running headers, contents lines left out
            pieces = furniture.sentences(doc, number - 1)
        else:
            pieces = read_pieces(doc["content"])
        if pieces and title:  # a long title line is not a sentence of the text
            if furniture is None and pieces[0].text.lstrip("#").strip() == title:
                pieces = pieces[1:]
            head = doc["content"].splitlines()[pieces[0].line] if pieces else ""
            if furniture is not None and head.strip().lstrip("#").strip() == title:
                pieces = [p for p in pieces if p.line != pieces[0].line]  # even cut in two
        for position, piece in enumerate(pieces):
            sentence = piece.text
            raw.append((number, position, sentence, analyze(sentence), title, title_terms))
            wraps.append(
                join_wrapped_lines and bool(position) and continues(pieces[position - 1], piece)
            )
    if not raw:
        return []
    cosines, vectors = similarities_to(query, [r[2] for r in raw])
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
    needed = max(1, math.ceil(min_term_overlap * len(query_terms)))
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
        semantic = has_model and similarity >= min_similarity
        eligible = lexical or semantic
        shown = trim_sentence(sentence, kind, query_terms, query_words) if eligible else sentence
        carried = {t: idf[t] for t in titled if t in content_terms}
        named_as = ""
        if (
            name_by_title
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
            CandidateSentence(
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
                wraps=wraps[index],
            )
        )
    return out
