"""Page furniture: the lines of a converted page that belong to the layout, not to its text.

A PDF's text layer, and a web page turned into Markdown, hold more than the prose: section
headings, the running header or footer a typesetter repeats on every page ("Chapter 2: ASN.1
structure handling 4"), table-of-contents and index lines ("2.4 Library Notes . . . . . 4"),
and the title page's fragments. ``split_sentences`` keeps every line of five words or more,
so these reach the extractive generator as sentences, and they share the question's words
by design (a heading names its topic): on the conversion quality set
(``bench/conversion_quality.py``) they were quoted as answers. None of them answers anything.

``Furniture`` tells them apart with signals that do not depend on a particular document:

* the chunk's own heading path and title (``section``, ``title`` metadata): a line that is,
  or sits inside, one of those headings (numbering and page number aside) is a heading;
* dotted leaders ("Header file libtasn1.h . . . . 35"): a table-of-contents or index line;
* a chapter, section, appendix or part marker opening a line with no closing punctuation
  and no verb: a heading, or a running header when a page number ends it; and a line that
  spells a heading such a line (or a contents line) names, among the documents at hand;
* a line that comes back on several pages (or chunks) of one source among the documents
  at hand, the same but for its digits: a running header or footer (the page number is what
  changes), or three times and more with no closing punctuation: a footer;
* a section number ("2.3 ", or "4 " before a title-case or short line, or with a page number
  after it) opening a line that stands alone, and a short title-case fragment with neither a
  verb nor closing punctuation ("RECOVERING DATA FROM DAMAGED FILES"): a heading or a title.
  A line that the one before runs into, or that runs into the next (opening in lower case),
  is part of a sentence, whatever it looks like ("In 2005, Kouvanis and Berry [KB05]").

"No verb" is a word list (auxiliaries, modals and common present-tense verbs), not a parser:
a line with one of them is kept unless it is a contents line or spells a heading, so a
sentence that answers stays even when it looks like a heading. Table rows ("CACHE 16 Watch
cache files being written") are neither title case nor numbered, and stay; lines of a fenced
code block are code, never furniture.

The same reading gives each sentence its line (``read_pieces``), so the generator can quote a
sentence the page's width cut at a line end with the rest of it (``continues``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parallel_rag.nodes.generate.function_words import FUNCTION_WORDS as _FUNCTION_WORDS
from parallel_rag.nodes.generate.sentences import LIST_MARKER, split_sentences

_CLOSING = (".", "!", "?", ";", ",", ":")
# a run of four dots or more, spaced or not ("....", ". . . ."), or ellipsis characters
_LEADERS = re.compile(r"(?:\.\s*){4,}|\u2026{2,}|(?:\u2026\s*\.\s*){2,}")
_PAGE_NUMBER = r"(?:\d{1,4}|[ivxlc]{1,6})"
_TRAILING_PAGE = re.compile(rf"\s+{_PAGE_NUMBER}$", re.IGNORECASE)
_LEADING_PAGE = re.compile(rf"^{_PAGE_NUMBER}\s+(?=\S)", re.IGNORECASE)
_MARKER = re.compile(
    r"^(?:chapter|section|appendix|part|lecture|lesson|unit)\s+(?:\d+|[A-Z]|[IVXLC]+)"
    r"(?:\.\d+)*\b[:.\-\u2013\u2014]?\s*",
    re.IGNORECASE,
)
_NUMBERED = re.compile(r"^(?:\d+|[A-Z])(?:\.\d+)+\.?\s+|^\d+\.?\s+(?=[A-Z])")
_DECORATION = re.compile(r"[#\u00a7*_`]+")
_WORD = re.compile(r"[^\W_][\w'\u2019.\-]*")
_VERBS = frozenset(
    """is are was were be been being am isn't aren't wasn't weren't has have had do does did
    doesn't don't can cannot can't could will won't would shall should may might must
    returns uses contains takes gives makes means needs provides allows requires generates
    creates sets gets holds keeps reads writes calls stands refers runs lets says shows tells
    works finds prints becomes comes goes stores""".split()
)
_TITLE_SHARE = 0.75  # of a fragment's content words capitalised: a title, not a sentence
_MAX_FURNITURE_WORDS = 15  # a longer line without a verb is a list or a table row, kept


def _plain(text: str) -> str:
    """Lower case, Markdown decoration and curly quotes out, spaces collapsed, closing
    punctuation stripped: the form two headings are compared in."""
    text = _DECORATION.sub(" ", text).replace("\u2019", "'").replace("\\", "")
    return " ".join(text.lower().split()).strip(" .:;,-\u2013\u2014")


def _core(text: str) -> str:
    """The heading a line spells once its page number, chapter marker and section number
    are taken off ("Chapter 2: ASN.1 structure handling 4" -> "asn.1 structure handling")."""
    text = _LEADERS.sub(" ", _DECORATION.sub(" ", text)).strip()
    text = _TRAILING_PAGE.sub("", _LEADING_PAGE.sub("", text)).strip()
    text = _MARKER.sub("", text)
    text = _NUMBERED.sub("", text)
    return _plain(text)


def _has_verb(words: Sequence[str]) -> bool:
    return any(w.lower() in _VERBS for w in words)


def _title_case(words: Sequence[str]) -> bool:
    """Most content words capitalised (an acronym counts; an identifier with an underscore
    or a digit does not count at all: a line of those is a table or code)."""
    content = [w for w in words if w.lower() not in _FUNCTION_WORDS and w[0].isalpha()]
    content = [w for w in content if "_" not in w and not any(c.isdigit() for c in w)]
    if len(content) < 3:
        return False
    capitalised = sum(w[0].isupper() for w in content)
    return capitalised / len(content) >= _TITLE_SHARE


def headings_of(metadata: Mapping[str, Any]) -> list[str]:
    """The chunk's heading texts, compared as ``_core`` leaves them: each level of its
    ``section`` path ("2 Utilities > 2.1 Invoking asn1Parser") and its ``title``."""
    levels = [str(metadata.get("title") or "")]
    section = metadata.get("section")
    if isinstance(section, str):
        levels += section.split(" > ")
    elif isinstance(section, Sequence):
        levels += [str(s) for s in section]
    return [c for c in (_core(level) for level in levels) if c]


@dataclass(frozen=True)
class Piece:
    """A sentence of a chunk as ``split_sentences`` cuts it, with the line it comes from."""

    text: str
    line: int  # its line's number in the chunk
    first: bool  # it opens its line
    listed: bool  # its line is a list item ("- ", "* ", "\u2022 ")
    full: bool = True  # its line runs to the chunk's usual width (``read_pieces``)
    code: bool = False  # its line is inside a fenced code block (Markdown ```)


_FULL_WIDTH = 0.7  # of the chunk's usual line length: a line cut there by the width


def read_pieces(content: str) -> list[Piece]:
    """The chunk's sentences, exactly as ``split_sentences`` gives them (it reads line by line,
    so cutting each line alone is the same cut), each with its line. A line is ``full`` when it
    is at least 0.7 of the chunk's usual line length (the 80th percentile; the longest line
    of a chunk of fewer than five lines): prose the width wrapped, not a table row or a list
    line that ends short of it."""
    lines = content.splitlines()
    lengths = sorted(len(line.strip()) for line in lines if line.strip())
    # the longest line of a short chunk ("Title\nA paragraph on one line")
    width = lengths[int(0.8 * (len(lengths) - 1))] if len(lengths) >= 5 else max(lengths, default=0)
    pieces = []
    code = False
    for number, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            code = not code
            continue
        listed = bool(LIST_MARKER.match(line.strip()))
        full = len(line.strip()) >= _FULL_WIDTH * width
        for i, sentence in enumerate(split_sentences(line)):
            pieces.append(Piece(sentence, number, i == 0, listed, full, code))
    return pieces


def continues(before: Piece, after: Piece) -> bool:
    """Whether ``after`` is the rest of ``before``'s sentence: ``before`` ends its line with no
    closing stop, ``after`` opens the next line (not a new list item), and either that line
    opens in lower case or ``before``'s line is ``full`` (the width cut it, not a table's
    column). A PDF's text layer, and wrapped Markdown, break sentences at line ends;
    ``split_sentences`` cuts at lines, so "The *cif* in `ffi_cif` stands for" and "Call
    InterFace." are two pieces of one sentence."""
    return (
        after.line == before.line + 1
        and after.first
        and not after.listed
        and not (before.code or after.code)
        and not before.text.rstrip(" *_`").endswith((".", "!", "?", ":"))
        and (before.full or after.text[:1].islower())
    )


class Furniture:
    """Which sentences of a set of documents are page furniture (see the module docstring).

    Built once per answer from the fused documents, so a running header is recognised by
    coming back on the pages those documents hold."""

    def __init__(self, documents: Sequence[Mapping[str, Any]]):
        pages: dict[tuple[str, str], set[tuple[Any, str]]] = defaultdict(set)
        # headings a contents line or a running header names, by source
        self._named: dict[str, set[str]] = defaultdict(set)
        for number, document in enumerate(documents):
            metadata = document.get("metadata") or {}
            where = metadata.get("page", metadata.get("chunk_index", number))
            for line in str(document.get("content") or "").splitlines():
                line = line.strip()
                if line and not line.endswith((".", "!", "?")):
                    key = self._key(metadata, line, number)
                    pages[key].add((where, line))
                    if _LEADERS.search(line) or _MARKER.match(_LEADING_PAGE.sub("", line)):
                        if len(core := _core(line).split()) >= 2:
                            self._named[key[0]].add(" ".join(core))
        self._running: set[tuple[str, str]] = set()
        for key, seen in pages.items():
            places = {where for where, _ in seen}
            spellings = {line for _, line in seen}
            if len(places) >= 3 or (len(places) >= 2 and len(spellings) >= 2):
                self._running.add(key)

    @staticmethod
    def _key(metadata: Mapping[str, Any], line: str, number: int) -> tuple[str, str]:
        """A line as a running header repeats it: its source, and the line with every number
        the same (the page number is what changes)."""
        source = str(metadata.get("source") or metadata.get("file_id") or f"#{number}")
        return source, re.sub(r"\d+", "0", _plain(line))

    def sentences(self, document: Mapping[str, Any], number: int = 0) -> list[Piece]:
        """The document's sentences (``read_pieces``) without its furniture; ``number`` is
        its place among the documents this was built from."""
        metadata = document.get("metadata") or {}
        lines = [line.strip() for line in str(document.get("content") or "").splitlines()]
        pieces = read_pieces(str(document.get("content") or ""))
        return [p for p in pieces if not self.reason(p, lines, metadata, number)]

    def reason(
        self, piece: Piece, lines: Sequence[str], metadata: Mapping[str, Any], number: int = 0
    ) -> str:
        """Why ``piece`` (of a chunk whose stripped ``lines`` it comes from) is furniture:
        "heading", "contents", "running header" or "title"; "" when it is text."""
        text = piece.text.strip()
        words = _WORD.findall(_DECORATION.sub(" ", text))
        if not words or piece.code:
            return ""  # a line of a code block is code, whatever it looks like
        if _LEADERS.search(lines[piece.line]):
            return "contents"  # its page number too, cut off after the leaders' last dot
        verb = _has_verb(words)
        core = _core(text)
        marked = _MARKER.match(_LEADING_PAGE.sub("", text))
        if not marked and core in self._named.get(self._key(metadata, text, number)[0], ()):
            return "heading"  # the contents or a running header names it
        line = _core(lines[piece.line])  # a heading cut in two ("Sonatas, Op." "5 (Vivaldi)")
        for heading in headings_of(metadata) if core else ():
            if core == heading or line == heading:
                return "heading"
            if not verb and len(core.split()) >= 2 and core in heading:
                return "heading"
        if verb:
            return ""  # a clause, kept whatever else it looks like
        paged = _TRAILING_PAGE.search(text) is not None
        if text.rstrip(" *_`").endswith(_CLOSING) or len(words) > _MAX_FURNITURE_WORDS:
            return ""
        if piece.first and self._key(metadata, lines[piece.line], number) in self._running:
            return "running header"
        if marked:
            return "running header" if paged else "heading"
        # the rest look like headings only when they stand alone: a line that the one
        # before runs into, or that runs into the next, is part of a sentence
        before = lines[piece.line - 1] if piece.line else ""
        after = lines[piece.line + 1] if piece.line + 1 < len(lines) else ""
        wrapped = (before and not before.endswith(_CLOSING) and text[0].islower()) or (
            after[:1].islower()
        )
        if wrapped or not piece.first:
            return ""
        numbered = _NUMBERED.match(text)
        if (
            numbered
            and (
                paged
                or "." in numbered.group().strip(" .")  # "3.2 ": a subsection's number
                or _title_case(words[1:])
                or len(words) <= 6
            )
        ):
            return "contents" if paged else "heading"
        if len(words) <= 12 and text[0].isupper() and _title_case(words):
            return "title"
        return ""
