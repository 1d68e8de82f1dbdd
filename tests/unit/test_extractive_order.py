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
