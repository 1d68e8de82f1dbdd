"""What a question asks for, and what a sentence offers towards it: the heuristics the
extractive generator scores and trims sentences with (plain regular expressions, no model).
"""

from __future__ import annotations

import re
from typing import Literal

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


def lowered_words(text: str) -> set[str]:
    """The text's words, lower case: what a sentence must go beyond to offer an answer."""
    return {w.lower() for w in _WORD.findall(text)}


def quantities(text: str) -> set[str]:
    """The numbers the text names that are not years, lower case (``"3,000"``, ``"twelve"``)."""
    years = {m.lower() for m in _YEAR.findall(text)}
    return {m.lower().strip(".,") for m in _NUMBER.findall(text)} - years
