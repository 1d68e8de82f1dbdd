"""The extractive generator reads a chunked document as one document, takes the sentence that
names what the best one leaves open, and opens its answer with the sentence most likely to
carry the asked-for answer."""

from __future__ import annotations

import pytest
from parallel_rag.nodes.generate.extractive import ExtractiveGenerator
from parallel_rag.nodes.generate.questions import question_focus

LAW_QUESTION = "What law relates word frequency?"


def law_documents(sibling_source: str) -> list[dict]:
    """Four fused chunks: the first and the last are chunks 1 and 0 of one document (unless
    ``sibling_source`` names another), the third an unrelated document whose opening sentence
    matches the question as well as the last one's."""
    return [
        {
            "id": "zipf-1",
            "content": "Frequent words make up most of any text.",
            "metadata": {"source": "zipf.md", "title": "Zipf's Law", "chunk_index": 1},
        },
        {
            "id": "filler",
            "content": "Bananas are yellow.",
            "metadata": {"source": "fruit.md", "title": "Fruit"},
        },
        {
            "id": "heaps",
            "content": "Heaps' law relates word frequency to vocabulary size.",
            "metadata": {"source": "heaps.md", "title": "Heaps' Law", "chunk_index": 0},
        },
        {
            "id": "zipf-0",
            "content": "Zipf's law relates word frequency to frequency rank.",
            "metadata": {"source": sibling_source, "title": "Zipf's Law", "chunk_index": 0},
        },
    ]


def test_a_later_chunk_of_the_top_document_ranks_with_that_document():
    generator = ExtractiveGenerator(max_sentences=1)
    same = generator.generate(LAW_QUESTION, law_documents("zipf.md"))
    # the opening of the top-ranked document, not Heaps' that fusion ranked above it
    assert same.answer == "Zipf's law relates word frequency to frequency rank. [4]"
    other = generator.generate(LAW_QUESTION, law_documents("another.md"))
    assert other.cited_numbers == [3]  # a 4th-ranked document of its own ranks below the 3rd


PREDICTED = (
    "Where the pattern demanded it, Mendeleev left gaps and predicted that unknown elements "
    "would be found to fill them."
)
NAMED = "He called three of them eka-aluminium, eka-boron and Eka-silicon."
TABLE = "In 1869 Mendeleev published a table of the 63 elements then known, in Saint Petersburg."


def test_a_sentence_that_names_nothing_asked_brings_the_next_one_that_does():
    docs = [
        {"id": "gaps", "content": f"{PREDICTED} {NAMED}", "metadata": {}},
        {"id": "table", "content": TABLE, "metadata": {}},
    ]
    generated = ExtractiveGenerator(max_words=40).generate(
        "Which elements did Mendeleev predict?", docs
    )
    # the best match names no element; its continuation does, and comes along with it
    assert generated.answer.startswith(f"{PREDICTED} {NAMED} [1]")
    # a sentence that names something itself is quoted alone
    docs[0]["content"] = (
        f"{PREDICTED.replace('Mendeleev', 'Mendeleev, like Lothar Meyer,')} {NAMED}"
    )
    generated = ExtractiveGenerator(max_words=40).generate(
        "Which elements did Mendeleev predict?", docs
    )
    assert NAMED not in generated.answer


@pytest.mark.parametrize(
    ("question", "focus"),
    [
        ("Which algorithm did Ada Lovelace publish for the Analytical Engine?", "algorithm"),
        ("In what city did the Prince of tenors star in a film?", "city"),
        ("What is the name of the fight song of the university in Lawrence?", "fight song"),
        ("What type of forum did a former Soviet statesman initiate?", "forum"),
        ("This singer of A Rather Blustery Day also voiced what hedgehog?", "hedgehog"),
        ("Who designed the Millau Viaduct?", ""),
        ("What is PForDelta?", ""),
        ("What did Sir William Arrol build?", ""),
    ],
)
def test_question_focus_is_the_noun_the_question_asks_an_instance_of(question, focus):
    assert question_focus(question) == focus


def test_a_sentence_that_refers_back_is_quoted_right_after_its_antecedent():
    docs = [
        {
            "id": "alpha",
            "content": "The Alpha Bridge over the river Tarn was opened by Jacques Chirac. "
            "It was designed by Michel Virlogeux.",
            "metadata": {},
        },
        {"id": "beta", "content": "The Beta Bridge over the Tarn opened in 2010.", "metadata": {}},
    ]
    generated = ExtractiveGenerator().generate("Who designed the Alpha Bridge over the Tarn?", docs)
    # chosen third, after Beta, "It" is still quoted where it means the Alpha Bridge
    assert generated.answer == (
        "The Alpha Bridge over the river Tarn was opened by Jacques Chirac. "
        "It was designed by Michel Virlogeux. [1] The Beta Bridge over the Tarn opened in 2010. [2]"
    )


ADA_OPENING = (
    "Augusta Ada King, Countess of Lovelace, was born in London on 10 December 1815, the only "
    "legitimate child of the poet Lord Byron and Anne Isabella Milbanke. At seventeen she met "
    "Charles Babbage and became fascinated by his design for the Analytical Engine. In 1842 the "
    "Italian engineer Luigi Menabrea published a paper in French describing the Analytical Engine."
)
ADA_NOTES = (
    "Note G set out a step-by-step method for the engine to calculate Bernoulli numbers. It is "
    "often described as the first published computer program."
)


@pytest.fixture(scope="module")
def minilm():
    from parallel_rag.backends.encoders.embeddings import load_embeddings
    from parallel_rag.graph.loading import load_config

    config, _ = load_config(None)
    model = load_embeddings(config.embeddings.model, config.embeddings.device)
    return lambda: model


def test_the_answer_opens_with_the_sentence_that_is_what_the_question_asks_for(minilm):
    docs = [
        {
            "id": "ada-0",
            "content": ADA_OPENING,
            "metadata": {"source": "ada.md", "title": "Ada Lovelace", "chunk_index": 0},
        },
        {
            "id": "ada-1",
            "content": ADA_NOTES,
            "metadata": {"source": "ada.md", "title": "Ada Lovelace", "chunk_index": 1},
        },
    ]
    question = "Which algorithm did Ada Lovelace publish for the Analytical Engine?"
    generated = ExtractiveGenerator(embeddings=minilm).generate(question, docs)
    # the method is the algorithm asked for; the paper that named the engine is context
    assert generated.answer.startswith("Note G set out a step-by-step method"), generated.answer
    assert "Menabrea" in generated.answer
    unfocused = ExtractiveGenerator(embeddings=minilm, focus_weight=0).generate(question, docs)
    assert sorted(unfocused.answer.split()) == sorted(generated.answer.split())  # same sentences
