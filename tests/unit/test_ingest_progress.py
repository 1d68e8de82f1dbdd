"""Ingest shows a progress bar per stage on a terminal (files converted with their pages and
chunks, then chunks indexed a second with the step under way), none in a log or pipe or with
``progress=False``; and a sentence that is a whole chunk is stored with that chunk's vector
instead of being embedded a second time."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from document_files import PDF_PAGES, two_bm25_config, write_pdf
from parallel_rag.backends.encoders.embeddings import embedding_identity
from parallel_rag.nodes.generate.sentence_vectors import SentenceVectorStore
from parallel_rag.studio import ingestion
from parallel_rag.studio.ingestion import embed
from parallel_rag.studio.ingestion.chunk import Chunk


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_pdf(folder / "manual.pdf")
    (folder / "notes.md").write_text("# Notes\n\nThe pump hums when the seal is worn.\n")
    return folder


def ingest(corpus, tmp_path, monkeypatch, stderr, progress=True) -> str:
    config, base_dir = two_bm25_config(tmp_path / "index")
    monkeypatch.setattr(sys, "stderr", stderr)
    report = ingestion.ingest_paths([corpus], config, base_dir, progress=progress)
    assert report.chunks >= len(PDF_PAGES) + 1
    return stderr.getvalue()


def test_a_terminal_sees_a_bar_per_stage_with_pages_and_chunks_a_second(
    corpus, tmp_path, monkeypatch
):
    shown = ingest(corpus, tmp_path, monkeypatch, Terminal())
    assert "converting: 100%" in shown and "2/2" in shown
    assert f"pages={len(PDF_PAGES)}" in shown
    assert "indexing: 100%" in shown and "chunk/s" in shown
    assert "writing 2 index(es)" in shown


def test_no_bars_in_a_log_or_pipe_or_when_quiet(corpus, tmp_path, monkeypatch):
    assert ingest(corpus, tmp_path / "pipe", monkeypatch, io.StringIO()) == ""
    assert ingest(corpus, tmp_path / "quiet", monkeypatch, Terminal(), progress=False) == ""


def test_a_sentence_that_is_a_whole_chunk_keeps_the_chunks_vector(tmp_path, monkeypatch):
    config, base_dir = two_bm25_config(tmp_path)
    chunks = [
        Chunk("one", "A single sentence chunk about pumps.", {"file_id": "f"}),
        Chunk("two", "Seals wear out. Replace them yearly.", {"file_id": "f"}),
    ]
    own = np.full(384, 1 / np.sqrt(384), dtype=np.float32)  # no model gives this vector
    embedded: list[str] = []
    real_load = embed.load_embeddings

    def counting_load(*args):
        model = real_load(*args)

        class Counting:
            def embed_documents(self, texts):
                embedded.extend(texts)
                return model.embed_documents(texts)

        return Counting()

    monkeypatch.setattr(embed, "load_embeddings", counting_load)
    count = embed.store_sentence_vectors(chunks, config, base_dir, False, {chunks[0].content: own})
    assert embedded == ["Seals wear out.", "Replace them yearly."] and count == 2
    store = SentenceVectorStore(
        base_dir / config.generator.sentence_vectors, embedding_identity(config.embeddings.model)
    )
    stored = store.get([chunks[0].content, "Seals wear out."])
    store.close()
    np.testing.assert_array_equal(stored[chunks[0].content], own)
    assert stored["Seals wear out."].shape == (384,)
