"""The LLM-free resolution of a follow-up: carry the subject over from the earlier turns.

"What company published the Journal of Psychotherapy Integration?" - "American Psychological
Association." - "Who was the first president of it?" Retrieving on the last turn alone searches
for "first president of it"; the subject is right there in the previous answer. This module
decides, without a model, whether the last question leans on the earlier turns and, when it
does, writes it out with that subject: "Who was the first president of American Psychological
Association?".

It is deliberately conservative, because the known failure of question-condensing chains is
rewriting a question that needed nothing (a greeting before it, a change of topic, another
language) into something else. A question is resolved only when it refers back: a pronoun or a
demonstrative with no antecedent of its own in the question ("it", "his", "that film", "there"),
or an elliptical turn ("And the second one?", "Why?"). A question that names its own subject,
or has nothing that points back, is retrieved on exactly as written. English reference words
only: a question in another language is never rewritten.

The subject is the salient name of the previous exchange: a short answer itself (it names the
answer's entity), else the first capitalised name the answer introduces that the question did
not contain, else the names in the previous question (what "it" most often means after an
answer that only describes). The caller keeps the question as written as a query view too, so
a wrong subject adds a view and cannot lose the question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from parallel_rag.nodes.contextualize.history import Turn

# words that point back to something outside the question
PERSONAL = {"he", "him", "his", "himself", "she", "her", "hers", "herself"}
NEUTRAL = {"it", "its", "itself", "they", "them", "their", "theirs", "themselves"}
DEMONSTRATIVE = {"this", "that", "these", "those"}
POSSESSIVE = {"its", "his", "their", "theirs", "hers"}
BE = {"is", "are", "was", "were", "be", "been", "'s"}
PREPOSITIONS = {
    "of", "about", "in", "for", "on", "at", "by", "from", "with", "to", "into", "after",
    "before", "than", "like", "since",
}  # fmt: skip
ELLIPSIS_OPENERS = ("and ", "what about ", "how about ", "and what about ", "also ", "so ")
# capitalised words that open questions and sentences, not names
FUNCTION_WORDS = {
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "are", "was",
    "were", "do", "does", "did", "can", "could", "would", "should", "will", "has", "have",
    "had", "the", "a", "an", "in", "on", "of", "and", "or", "but", "to", "for", "it", "its",
    "this", "that", "these", "those", "he", "she", "they", "his", "her", "their", "i", "you",
    "we", "my", "your", "our", "tell", "name", "list", "give", "please", "yes", "no", "also",
    "there", "here", "according", "as", "at", "by", "from", "with", "not", "so", "if", "then",
    "thanks", "thank", "hi", "hello", "ok", "okay", "sure", "great", "since", "over", "after",
    "before", "during", "between", "among", "under", "through", "into", "about", "besides",
    "despite", "apart", "now", "later", "again", "both", "each",
}  # fmt: skip
NAME_JOINERS = {"of", "the", "for", "and", "de", "la", "von", "van", "du", "del", "&"}
STOPWORDS = FUNCTION_WORDS | PREPOSITIONS | BE | {"about", "did", "does", "first", "one"}
SHORT_ANSWER_WORDS = 10
# kinds of thing a follow-up names instead of a pronoun ("the band", "that film")
CATEGORY_NOUNS = {
    "band", "group", "film", "movie", "show", "series", "song", "album", "track", "book",
    "novel", "play", "opera", "game", "company", "firm", "corporation", "business", "brand",
    "city", "town", "village", "suburb", "county", "state", "country", "province", "region",
    "island", "river", "lake", "mountain", "university", "college", "school", "institute",
    "museum", "library", "team", "club", "league", "player", "actor", "actress", "singer",
    "author", "writer", "director", "artist", "musician", "politician", "station", "network",
    "channel", "magazine", "newspaper", "journal", "organization", "organisation", "party",
    "church", "building", "bridge", "castle", "airport", "stadium", "arena", "venue", "base",
    "ship", "car", "software", "program", "programme", "website", "product", "character",
    "event", "festival", "award", "war", "battle", "species", "plant", "animal", "disease",
    "drug", "language", "family", "dynasty", "empire", "person", "man", "woman", "place",
}  # fmt: skip

_TOKEN = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9'’.\-]*[A-Za-z0-9]|[A-Za-z0-9]|\"[^\"]+\"|[^\sA-Za-z0-9]"
)
_CITATION = re.compile(r"\s*\[\d+(?:\s*[,;]\s*\d+)*\]")


@dataclass(frozen=True)
class Resolution:
    """What to retrieve on, and why: ``question`` as written, ``standalone`` (equal to it when
    nothing was resolved), the carried ``subject`` and a sentence of ``reason``."""

    question: str
    standalone: str
    subject: str | None
    reason: str

    @property
    def resolved(self) -> bool:
        return self.standalone != self.question


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _is_capitalised(token: str) -> bool:
    return token[:1].isupper() or (token[:1].isdigit() and any(c.isalpha() for c in token))


def names_in(text: str) -> list[str]:
    """Capitalised names in ``text`` in order ("Journal of Psychotherapy Integration"), and
    quoted titles; a sentence's capitalised first word counts only when a name follows it."""
    names: list[str] = []
    for quoted in re.findall(r"[\"“]([^\"”]{2,80})[\"”]", text):
        names.append(quoted.strip())
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        tokens = [t for t in _tokens(sentence) if not t.startswith('"')]
        current: list[str] = []
        for position, token in enumerate(tokens + [""]):
            lower = re.split(r"['’]", token.lower())[0]  # "What's" is "what"
            if token and _is_capitalised(token) and lower not in FUNCTION_WORDS:
                current.append(token)
                continue
            if token and current and lower in NAME_JOINERS and position + 1 < len(tokens):
                following = tokens[position + 1]
                if _is_capitalised(following) and following.lower() not in FUNCTION_WORDS:
                    current.append(token)
                    continue
            while current and current[-1].lower() in NAME_JOINERS:
                current.pop()
            if current:
                names.append(" ".join(current))
            current = []
    seen: set[str] = set()
    return [n for n in names if not (n.lower() in seen or seen.add(n.lower()))]


def _content_words(text: str) -> list[str]:
    return [t for t in _tokens(text) if t[:1].isalnum() and t.lower() not in STOPWORDS]


@dataclass(frozen=True)
class _Reference:
    index: int  # token position of the referring word
    word: str


def _reference(tokens: list[str]) -> _Reference | None:
    """The first word of the question that points outside it, if any."""
    lowered = [t.lower() for t in tokens]
    for index, word in enumerate(lowered):
        before = lowered[index - 1] if index else ""
        after = lowered[index + 1] if index + 1 < len(lowered) else ""
        if word in PERSONAL or word in NEUTRAL:
            if word == "it" and after in {"take", "takes", "took"} and index + 2 < len(lowered):
                continue  # "how long does it take to ..." points nowhere
            return _Reference(index, tokens[index])
        if word == "there" and before not in BE and after not in BE and not after.startswith("'"):
            return _Reference(index, tokens[index])
        if word in DEMONSTRATIVE:
            # "of that", "this film", "That band was ...": a demonstrative, not "the band that"
            if (
                index == 0
                or before in PREPOSITIONS
                or before in BE
                or not after[:1].isalnum()
                or after.rstrip("s") in CATEGORY_NOUNS
            ):
                return _Reference(index, tokens[index])
    return None


def _has_own_subject(tokens: list[str], reference: _Reference) -> bool:
    """A name in the question before the reference: it then most likely points at it. A person
    ("he", "her") needs a name of two words or more: "the IFFHS voted him" is not about IFFHS."""
    names = names_in(" ".join(tokens[: reference.index]))
    if reference.word.lower() in PERSONAL:
        names = [n for n in names if len(n.split()) > 1]
    return bool(names)


def _definite_reference(tokens: list[str]) -> _Reference | None:
    """ "the band", "the city's": in a short question with no name of its own, a definite noun
    phrase points at the thing just talked about."""
    if len(tokens) > 12 or names_in(" ".join(tokens)):
        return None
    lowered = [t.lower() for t in tokens]
    for index, word in enumerate(lowered[:-1]):
        noun = re.split(r"['’]", lowered[index + 1])[0]
        if word == "the" and (noun in CATEGORY_NOUNS or noun.rstrip("s") in CATEGORY_NOUNS):
            return _Reference(index, tokens[index])
    return None


def _clean_answer(text: str) -> str:
    return _CITATION.sub("", text).strip()


def asks_for_a_name(question: str) -> bool:
    """Whether ``question`` asks for a new name ("What company published X?", "Who wrote X?",
    "Where ..."): a later "it" then most often means the answer, not X. A question about X itself
    ("What is X?", "How does X work?") keeps X as the subject."""
    words = [w.lower() for w in _tokens(question) if w[:1].isalnum()]
    if not words:
        return False
    first, second = words[0], words[1] if len(words) > 1 else ""
    if first in {"who", "whom", "whose", "where"}:
        return True
    return first in {"what", "which"} and second not in BE | {"do", "does", "did", "can", "about"}


def _by_salience(names: list[str], question: str, answer: str) -> list[str]:
    """Names an answer introduces, the likeliest subject first: one holding the noun the
    question asked for ("Which bridge ...?" -> "Tacoma Narrows Bridge"), not a variant of the
    question's own names, repeated most, then the first."""
    words = [w.lower() for w in _tokens(question) if w[:1].isalnum()]
    head = words[1] if len(words) > 1 and words[0] in {"what", "which"} else ""
    own = {w.lower() for name in names_in(question) for w in name.split()} - NAME_JOINERS

    def salience(item: tuple[int, str]) -> tuple[int, int, int, int]:
        position, name = item
        parts = {w.lower() for w in name.split()}
        return (-(head in parts), bool(parts & own), -answer.count(name), position)

    return [name for _, name in sorted(enumerate(names), key=salience)]


def subject_of(turns: Sequence[Turn], *, prefer_answer: bool) -> tuple[str | None, str]:
    """The subject of the newest exchange with one, and where it came from: the answer's name
    when the question asked for one (or ``prefer_answer``: "he", "she", "there"), else the
    question's own."""
    for position in range(len(turns) - 1, -1, -1):
        turn = turns[position]
        if turn.role == "assistant":
            answer = _clean_answer(turn.text)
            question = next((t.text for t in reversed(turns[:position]) if t.role == "user"), "")
            asked, words = question.lower(), answer.rstrip(".!").split()
            own = names_in(question)
            while words and words[0].lower() in PREPOSITIONS:  # "At the Colisée."
                words = words[1:]
            named = names_in(answer) or any(c.isdigit() for c in answer)
            short_answer = words and len(words) <= SHORT_ANSWER_WORDS and named
            if short_answer and not answer.rstrip().endswith("?") and answer.lower() not in asked:
                short = " ".join(words).rstrip(".!").strip()
                if words[0] in ("The", "A", "An"):  # "When did the Tacoma Narrows Bridge open?"
                    short = words[0].lower() + short[len(words[0]) :]
                if prefer_answer or asks_for_a_name(question) or not own:
                    return short, "the previous answer"
            new = _by_salience(
                [n for n in names_in(answer) if n.lower() not in asked], question, answer
            )
            if new and (prefer_answer or asks_for_a_name(question) or not own):
                return new[0], "the previous answer"
            if own:
                return own[0], "the previous question"
            if new:
                return new[0], "the previous answer"
        else:
            names = names_in(turn.text)
            if names:
                return names[0], "the previous question"
    return None, "no earlier turn names a subject"


def _substitute(tokens: list[str], reference: _Reference, subject: str) -> str:
    word = reference.word.lower()
    out = list(tokens)
    nxt = tokens[reference.index + 1] if reference.index + 1 < len(tokens) else ""
    if (
        (word in DEMONSTRATIVE or word == "the")
        and nxt[:1].isalpha()
        and nxt.lower() not in STOPWORDS
    ):
        out[reference.index] = "the"  # "that film" -> "the film (Subject)"
        out.insert(reference.index + 2, f"({subject})")
    elif word in POSSESSIVE or (
        word == "her" and nxt[:1].isalpha() and nxt.lower() not in STOPWORDS
    ):
        out[reference.index] = f"{subject}'s"
    elif word == "there":
        out[reference.index] = f"in {subject}"
    else:
        out[reference.index] = subject
    text = ""
    for token in out:
        glue = not text or (len(token) == 1 and not token.isalnum() and token not in '("')
        text += token if glue else f" {token}"
    return text


def resolve(question: str, turns: Sequence[Turn]) -> Resolution:
    """The question written out with its subject when it refers back to the earlier ``turns``;
    else the question as it is, with the reason it was kept."""
    stripped = question.strip()
    if not turns:
        return Resolution(question, question, None, "first turn: nothing to resolve")
    tokens = _tokens(stripped)
    reference = _reference(tokens) or _definite_reference(tokens)
    lowered = stripped.lower()
    elliptical = lowered.startswith(ELLIPSIS_OPENERS) or len(_content_words(stripped)) <= 1
    if reference is not None and _has_own_subject(tokens, reference):
        return Resolution(
            question, question, None,
            f"'{reference.word}' refers to a name in the question itself: kept as written",
        )  # fmt: skip
    if reference is None and not elliptical:
        return Resolution(question, question, None, "self-contained: nothing refers back")
    short = len(_content_words(stripped)) <= 3
    if reference is None and names_in(stripped) and (not elliptical or not short):
        return Resolution(question, question, None, "names its own subject: kept as written")
    prefer_answer = reference is not None and (
        reference.word.lower() in PERSONAL or reference.word.lower() in ("there", "the")
    )
    subject, source = subject_of(turns, prefer_answer=prefer_answer)
    previous = next((t.text for t in reversed(turns) if t.role == "user"), "")
    if reference is None and names_in(stripped) and names_in(previous) and short:
        # "And Macbeth?" after "Who wrote Hamlet?": the previous question about the new name
        old_name, new_name = names_in(previous)[-1], names_in(stripped)[0]
        standalone = previous.replace(old_name, new_name)
        return Resolution(
            question, standalone, new_name,
            f"elliptical follow-up: the previous question asked of '{new_name}'",
        )  # fmt: skip
    if subject is None:
        return Resolution(question, question, None, f"refers back, but {source}: kept as written")
    if reference is not None:
        standalone = _substitute(tokens, reference, subject)
        why = f"'{reference.word}' refers back: carried '{subject}' over from {source}"
    else:
        standalone = f"{previous} {stripped} ({subject})" if previous else f"{stripped} ({subject})"
        why = f"elliptical follow-up: carried '{subject}' and the previous question over"
    if standalone.strip() == stripped:
        return Resolution(question, question, None, "nothing to carry over: kept as written")
    return Resolution(question, standalone, subject, why)
