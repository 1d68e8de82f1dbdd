"""Sentence trimming: a quoted sentence without the clauses and parentheses that carry
nothing the question asks about, each cut marked by ``ELISION``.
"""

from __future__ import annotations

from parallel_rag.backends.bm25.analysis import analyze
from parallel_rag.nodes.generate.questions import offers_answer, quantities

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
        return any(m not in query_words for m in quantities(piece))
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
