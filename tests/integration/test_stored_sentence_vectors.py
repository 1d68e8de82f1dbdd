"""Sentence vectors stored at ingest and read by the extractive generator, on real parts: the
packaged MiniLM, BM25 and Qdrant Edge on disk, the graph the CLI builds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from parallel_rag.backends.encoders.embeddings import embedding_identity, load_embeddings
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.loading import default_config_dict, parse_config
from parallel_rag.nodes.generate.sentence_vectors import SentenceVectorStore
from parallel_rag.nodes.generate.sentences import split_sentences
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.ingestion.chunk import load_chunks

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = ["docs.jsonl", "ada-lovelace.md", "unix.md", "millau-viaduct.md"]
QUESTION_IDS = ["q04", "q10", "q11", "q13"]


def config_with(**generator):
    data = default_config_dict()
    data["generator"] = generator
    return parse_config(data, source="test")


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("stored-sentences")
    config = config_with()
    paths = [EXAMPLES / "corpus" / f for f in FILES]
    report = ingest_paths(paths, config, base_dir, progress=False)
    return config, base_dir, report


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    lines = (EXAMPLES / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    by_id = {q["id"]: q for q in map(json.loads, filter(str.strip, lines))}
    return [by_id[i] for i in QUESTION_IDS]


class EmbedDocumentsCalls:
    """Records the texts the shared model is asked to embed as documents."""

    def __init__(self, monkeypatch):
        self.texts: list[str] = []
        model = load_embeddings()
        real = model.embed_documents

        def counting(texts):
            self.texts.extend(texts)
            return real(texts)

        monkeypatch.setattr(model, "embed_documents", counting)


def test_ingest_stores_a_vector_of_every_sentence_the_generator_embeds(ingested):
    config, base_dir, report = ingested
    path = base_dir / ".parallel-rag" / "sentence_vectors.sqlite3"
    store = SentenceVectorStore(path, embedding_identity(config.embeddings.model))
    chunks = [c for f in FILES for c in load_chunks(EXAMPLES / "corpus" / f)]
    sentences = list(dict.fromkeys(s for c in chunks for s in split_sentences(c.content)))
    assert report.sentences == len(sentences) == len(store) > 0
    assert store.missing(sentences) == []
    # the stored vector is the model's own vector of the sentence
    stored = store.get(sentences[:3])
    fresh = np.asarray(load_embeddings().embed_documents(sentences[:3]), dtype=np.float32)
    for sentence, vector in zip(sentences[:3], fresh, strict=True):
        np.testing.assert_allclose(stored[sentence], vector, atol=1e-5)


def test_a_fresh_graph_answers_without_embedding_evidence_and_as_without_the_store(
    ingested, questions, monkeypatch
):
    config, base_dir, _ = ingested
    calls = EmbedDocumentsCalls(monkeypatch)
    graph = build_graph(config, base_dir=base_dir)
    stored = [graph.invoke({"query": q["question"]}) for q in questions]
    assert calls.texts == []  # every evidence sentence came from the store
    assert all(r["answer"] and r["citations"] for r in stored)

    without = build_graph(config_with(sentence_vectors=None), base_dir=base_dir)
    embedded = [without.invoke({"query": q["question"]}) for q in questions]
    assert calls.texts  # the same graph without the store embeds the evidence per request
    for with_store, with_model in zip(stored, embedded, strict=True):
        assert [d["id"] for d in with_store["documents"]] == [
            d["id"] for d in with_model["documents"]
        ]
        assert with_store["answer"] == with_model["answer"]


def test_ingesting_the_same_files_again_embeds_no_sentence(ingested):
    config, base_dir, _ = ingested
    again = ingest_paths([EXAMPLES / "corpus" / FILES[0]], config, base_dir, progress=False)
    assert again.sentences == 0


def test_nothing_is_stored_when_turned_off(tmp_path):
    config = config_with(sentence_vectors=None)
    report = ingest_paths([EXAMPLES / "corpus" / "unix.md"], config, tmp_path, progress=False)
    assert report.sentences == 0 and report.chunks > 0
    assert not (tmp_path / ".parallel-rag" / "sentence_vectors.sqlite3").exists()


def test_the_dense_sentence_shard_reads_the_stored_vectors_instead_of_embedding_again(
    tmp_path, monkeypatch
):
    """With the default dense backend scoring sentences too, ingest embeds each sentence once:
    the generator's store is filled first and the sentence shard reads its vectors there."""
    calls = EmbedDocumentsCalls(monkeypatch)
    config = config_with()
    paths = [EXAMPLES / "corpus" / f for f in FILES]
    report = ingest_paths(paths, config, tmp_path, progress=False)
    chunks = [c for f in FILES for c in load_chunks(EXAMPLES / "corpus" / f)]
    contents = {c.content for c in chunks}
    sentences = {s for c in chunks for s in split_sentences(c.content)} - contents
    embedded = [t for t in calls.texts if t in sentences]
    assert report.sentences > 0 and sentences
    assert len(embedded) == len(set(embedded)) == len(sentences)  # each one once, not twice
    # and the dense branch still finds a chunk by one of its sentences
    graph = build_graph(config, base_dir=tmp_path)
    result = graph.invoke({"query": "Who designed the Millau Viaduct?", "top_k": 3})
    assert any("millau" in d["metadata"].get("source", "") for d in result["documents"])
