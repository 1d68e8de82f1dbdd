"""The extractive generator quotes sentences without the clauses and parentheses that carry
nothing the question needs, marks each cut, and still quotes and cites its evidence exactly."""

from __future__ import annotations

import re

import pytest
from parallel_rag.backends.bm25.analysis import analyze
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.nodes.generate.extractive import ExtractiveGenerator
from parallel_rag.nodes.generate.questions import answer_kind, opens_with_reference
from parallel_rag.nodes.generate.trimming import ELISION, clause_pieces, trim_sentence

WARD = (
    "Sela Ann Ward (born July 11, 1956) is an American actress, author and producer, "
    "best known for her roles on television beginning in the early '80s."
)
DAHL = (
    "Roald Dahl (13 September 1916 – 23 November 1990) was a British novelist, short story "
    "writer, poet, screenwriter, and fighter pilot."
)


def trim(sentence: str, query: str) -> str:
    words = {w.lower() for w in re.findall(r"\w+", query)}
    return trim_sentence(sentence, answer_kind(query), set(analyze(query)), words)


def words_in_order(quoted: str, source: str) -> bool:
    """Every word of ``quoted`` (marks aside) occurs in ``source``, in the same order."""
    at = 0
    for word in quoted.replace(ELISION, " ").split():
        at = source.find(word, at)
        if at < 0:
            return False
        at += len(word)
    return True


def test_clause_pieces_join_back_into_the_sentence():
    for sentence in (WARD, DAHL, "Plain sentence without marks.", "A (b [c] d) e, f; g – h."):
        pieces = clause_pieces(sentence)
        assert "".join(text for text, _ in pieces) == sentence
    assert [p for _, p in clause_pieces(WARD)] == [False, True, False, False, False]
    assert clause_pieces("Sales rose 1,000 units.") == [("Sales rose 1,000 units.", False)]


def test_trim_drops_a_birth_date_and_a_clause_the_question_does_not_need():
    trimmed = trim(WARD, "What is the middle name of the actress who plays Bobbi Bacha?")
    assert trimmed == f"Sela Ann Ward {ELISION} is an American actress {ELISION}"
    assert words_in_order(trimmed, WARD)


def test_trim_keeps_what_carries_the_asked_kind_or_the_question_terms():
    born = trim(WARD, "When was Sela Ward born?")  # the date is the answer
    assert born == f"Sela Ann Ward (born July 11, 1956) is an American actress {ELISION}"
    known = trim(WARD, "What is Sela Ward best known for?")
    assert known.endswith("best known for her roles on television beginning in the early '80s.")
    assert "1956" not in known


def test_trim_keeps_the_opening_clause_across_a_parenthesis():
    trimmed = trim(DAHL, "How many copies of Roald Dahl's books sold?")
    assert trimmed == f"Roald Dahl {ELISION} was a British novelist {ELISION}"


CIVIL_WAR = (
    'The Russian Civil War (Russian: "Grazhdanskaya voyna v Rossiyi", a war of many factions; '
    "November 1917 – October 1922) was a multi-party war in the former Russian Empire."
)


def test_a_parenthesis_keeps_only_the_items_that_carry():
    when = trim(CIVIL_WAR, "When was the multi-party conflict over?")
    assert when.startswith(
        f"The Russian Civil War ({ELISION}; November 1917 – October 1922) was a multi-party war"
    )
    assert words_in_order(when, CIVIL_WAR)
    # an item that holds a query term stays; so do items whose cut would save too little
    faction = trim(CIVIL_WAR, "When did the many factions of the Russian Civil War fight?")
    assert "(Russian: " in faction and "November 1917" in faction
    short = "The treaty (signed; 1920) ended the war between the two states in the region."
    assert trim(short, "When did the war end?") == short  # cutting "signed" saves too little
    nested = CIVIL_WAR.replace("a war of many factions", "a war (of many factions; long)")
    assert "(Russian: " in trim(nested, "When was the multi-party conflict over?")
    unclosed = "The war (Russian: a long name in another script; November 1917 – October 1922"
    assert trim(unclosed, "When was the multi-party conflict over?") == unclosed


def test_trim_leaves_short_pieces_whole():
    place = "Tysons is a census-designated place in Fairfax County, Virginia, United States."
    assert trim(place, "Tysons Galleria is located in what county?") == place


def test_a_manner_question_drops_clauses_that_only_offer_names():
    sentence = (
        "The term comes from a 2020 paper by Patrick Lewis at Facebook AI Research, "
        "presented at NeurIPS 2020 in Vancouver, Canada."
    )
    assert trim(sentence, "How can a chatbot consult reference material?").endswith(ELISION)
    assert trim(sentence, "Which paper did Patrick Lewis present?") == sentence


def test_a_sentence_that_opens_with_its_title_is_no_reference():
    title = "Their Lives: The Women Targeted by the Clinton Machine"
    assert not opens_with_reference(f"{title} is a book by Candice Jackson.", title)
    assert opens_with_reference("Their stories were told in a 2005 book.", title)


@pytest.fixture(scope="module")
def minilm():
    return load_embeddings()


def test_trimming_makes_room_for_the_sentence_that_answers(minilm):
    opening = (
        "The Millau Viaduct (French: Viaduc de Millau) is a cable-stayed bridge, one of the "
        "tallest structures in the world at 343 metres, which spans a deep gorge valley in the "
        "south."
    )
    designed = "It was designed by the structural engineer Michel Virlogeux."
    assert len(f"{opening} {designed}".split()) > 30  # whole, the two do not fit in 25 words
    docs = [{"id": "millau", "content": f"{opening} {designed}", "metadata": {}}]
    generator = ExtractiveGenerator(embeddings=lambda: minilm, max_words=25)
    generated = generator.generate("Who designed the Millau Viaduct?", docs)
    assert "Michel Virlogeux" in generated.answer
    assert ELISION in generated.answer and "343 metres" not in generated.answer
    assert len(re.sub(r"\[\d+\]", "", generated.answer).split()) <= 25
    assert generated.answer.endswith("[1]") and generated.cited_numbers == [1]
    assert words_in_order(re.sub(r"\[\d+\]", "", generated.answer), docs[0]["content"])
