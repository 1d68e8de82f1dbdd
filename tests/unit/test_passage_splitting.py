"""Passages for the dense index (``qdrant_edge``'s ``passages:``): long texts split into windows
the packaged MiniLM reads whole, measured with its own tokenizer, each led by the title."""

from __future__ import annotations

import pytest
from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings
from parallel_rag.backends.qdrant_edge.points import passage_point_id, passage_splitter, point_id
from parallel_rag.backends.qdrant_edge.retriever import PassageSettings, QdrantEdgeSettings
from pydantic import ValidationError

WORDS = (
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules "
    "while chloroplasts regulate electron transport under fluctuating irradiance "
).split()


@pytest.fixture(scope="module")
def splitter():
    settings = PassageSettings(max_tokens=64, stride=32)
    found = passage_splitter(load_embeddings(), BUNDLED, settings)
    assert found is not None  # the packaged model has a fast tokenizer
    return found


def long_text(words: int) -> str:
    return " ".join(f"{WORDS[i % len(WORDS)]}{i}" for i in range(words))


def pieces(splitter, text: str) -> int:
    return len(splitter.tokenizer(text)["input_ids"])  # special tokens included


def test_a_text_the_model_reads_whole_stays_one_passage(splitter):
    text = "Title\nA short abstract about leaves."
    assert splitter.split(text) == [text]


def test_long_text_windows_fit_the_model_overlap_and_cover_every_word(splitter):
    body = long_text(120)
    passages = splitter.split(f"Leaf biology\n{body}")
    assert len(passages) > 2
    assert all(pieces(splitter, p) <= 64 for p in passages)
    assert all(p.startswith("Leaf biology\n") for p in passages)  # the title leads each one
    seen = [p.removeprefix("Leaf biology\n").split() for p in passages]
    assert sorted({w for ws in seen for w in ws}) == sorted(set(body.split()))
    assert all(set(a) & set(b) for a, b in zip(seen, seen[1:], strict=False))  # overlap
    assert passages[-1].endswith(body.split()[-1])  # the last window ends with the text
    for ws in seen:  # windows cut between words, never inside one
        assert all(w in body.split() for w in ws)


def test_the_title_metadata_leads_passages_even_without_a_newline_rule(splitter):
    title = "A heading far too long to count as a short first line " * 2
    text = f"{title}\n{long_text(80)}"
    with_title = splitter.split(text, title=title)
    assert all(p.startswith(title) for p in with_title)
    no_newline = long_text(80)
    assert not any(p.startswith("Leaf") for p in splitter.split(no_newline))


def test_passage_points_have_stable_ids_and_passage_zero_is_the_chunk_point():
    assert passage_point_id("doc-1", 0) == point_id("doc-1")
    assert passage_point_id("doc-1", 2) == passage_point_id("doc-1", 2)
    assert len({passage_point_id("doc-1", n) for n in range(4)}) == 4


def test_passage_settings_are_validated():
    settings = QdrantEdgeSettings.model_validate({"passages": {"max_tokens": 200, "stride": 100}})
    assert settings.passages == PassageSettings(max_tokens=200, stride=100)
    assert QdrantEdgeSettings.model_validate({"passages": None}).passages is None
    with pytest.raises(ValidationError):
        QdrantEdgeSettings.model_validate({"passages": {"max_tokens": 8}})
    with pytest.raises(ValidationError):
        QdrantEdgeSettings.model_validate({"passages": {"stride": 0}})
    with pytest.raises(ValidationError):
        QdrantEdgeSettings.model_validate({"passages": {"window": 100}})


def test_by_default_windows_follow_each_other_and_the_last_ends_with_the_text():
    splitter = passage_splitter(load_embeddings(), BUNDLED, PassageSettings(max_tokens=64))
    body = long_text(130)
    passages = [p.removeprefix("Leaf biology\n") for p in splitter.split(f"Leaf biology\n{body}")]
    words = [p.split() for p in passages]
    assert len(words) > 2
    for a, b in zip(words[:-2], words[1:-1], strict=True):
        assert not set(a) & set(b)  # no overlap between full windows
        assert body.index(" ".join(b)) == body.index(" ".join(a)) + len(" ".join(a)) + 1
    assert body.endswith(passages[-1])
