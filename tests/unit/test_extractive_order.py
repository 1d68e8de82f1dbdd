"""The extractive generator reads a chunked document as one document, takes the sentence that
names what the best one leaves open, and opens its answer with the sentence most likely to
carry the asked-for answer."""

from __future__ import annotations

from parallel_rag.nodes.generate.generators import ExtractiveGenerator

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
