"""Stored sentence vectors: the SQLite store, the embeddings wrapper the extractive generator
reads them through, and the configuration that turns them on and off."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest
from parallel_rag.nodes.generate.extractive import ExtractiveGenerator
from parallel_rag.nodes.generate.sentence_vectors import (
    SentenceVectorStore,
    StoredSentenceEmbeddings,
    sentence_key,
)
from parallel_rag.nodes.generate.sentences import split_sentences

IDENTITY = "counting-letters"
DOCS = [
    {
        "id": "eiffel",
        "content": "The Eiffel Tower stands in Paris. It was completed in 1889 for a fair. "
        "Gustave Eiffel's company designed and built the tower.",
        "metadata": {"title": "Eiffel Tower"},
    },
    {
        "id": "forth",
        "content": "The Forth Bridge crosses the Firth of Forth in Scotland. It opened in 1890.",
        "metadata": {"title": "Forth Bridge"},
    },
]
QUESTION = "When was the Eiffel Tower completed?"


class CountingEmbeddings:
    """Bag-of-letters vectors; records every batch of documents it is asked to embed."""

    def __init__(self, letters: str = "abcdefghijklmnopqrstuvwxyz"):
        self.letters = letters
        self.batches: list[list[str]] = []
        self.queries: list[str] = []

    def _vector(self, text: str) -> list[float]:
        return [float(text.lower().count(letter)) for letter in self.letters]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return [self._vector(t) for t in texts]


def sentences_of(docs) -> list[str]:
    return [s for doc in docs for s in split_sentences(doc["content"])]


def filled_store(path: Path, texts: list[str]) -> SentenceVectorStore:
    store = SentenceVectorStore(path, IDENTITY)
    store.put(texts, CountingEmbeddings().embed_documents(texts))
    return store


def test_the_store_round_trips_float32_vectors(tmp_path):
    store = SentenceVectorStore(tmp_path / "sub" / "vectors.sqlite3", IDENTITY)
    assert store.get(["never stored"]) == {} and len(store) == 0  # no file yet: empty
    vectors = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
    assert store.put(["a", "b", "c"], vectors) == 3
    found = store.get(["c", "a", "missing", "a"])
    assert set(found) == {"a", "c"}
    assert found["a"].dtype == np.float32
    np.testing.assert_array_equal(found["a"], vectors[0])
    np.testing.assert_array_equal(found["c"], vectors[2])
    assert store.missing(["a", "x", "b", "x"]) == ["x"]
    # another process (a fresh store object) reads the same rows
    again = SentenceVectorStore(tmp_path / "sub" / "vectors.sqlite3", IDENTITY)
    np.testing.assert_array_equal(again.get(["b"])["b"], vectors[1])
    assert len(again) == 3


def test_rows_are_keyed_by_model_identity_and_text(tmp_path):
    path = tmp_path / "vectors.sqlite3"
    SentenceVectorStore(path, "model-a").put(["same text"], [[1.0, 2.0]])
    assert SentenceVectorStore(path, "model-b").get(["same text"]) == {}
    assert sentence_key("model-a", "same text") != sentence_key("model-b", "same text")
    assert sentence_key("model-a", "same text") != sentence_key("model-a", "same text.")
    # writing a text again replaces its row
    SentenceVectorStore(path, "model-a").put(["same text"], [[3.0, 4.0]])
    assert SentenceVectorStore(path, "model-a").get(["same text"])["same text"].tolist() == [
        3.0,
        4.0,
    ]


def test_the_wrapper_embeds_only_the_missing_texts_each_once(tmp_path):
    store = filled_store(tmp_path / "v.sqlite3", ["stored one", "stored two"])
    model = CountingEmbeddings()
    wrapped = StoredSentenceEmbeddings(model, store)
    texts = ["stored one", "new text", "stored two", "new text", "another"]
    vectors = wrapped.embed_documents(texts)
    assert model.batches == [["new text", "another"]]
    assert [list(v) for v in vectors] == CountingEmbeddings().embed_documents(texts)
    assert wrapped.embed_documents(["stored two"]) and model.batches == [["new text", "another"]]
    # queries go to the wrapped model, and other attributes are the wrapped model's
    assert wrapped.embed_query("query") == model._vector("query")
    assert model.queries == ["query"] and wrapped.letters == model.letters


def test_a_generator_reading_stored_vectors_embeds_no_evidence_and_answers_the_same(tmp_path):
    store = filled_store(tmp_path / "v.sqlite3", sentences_of(DOCS))
    plain_model = CountingEmbeddings()
    plain = ExtractiveGenerator(embeddings=lambda: plain_model, min_similarity=0.3)
    model = CountingEmbeddings()
    wrapped = StoredSentenceEmbeddings(model, store)
    stored = ExtractiveGenerator(embeddings=lambda: wrapped, min_similarity=0.3)
    assert stored.generate(QUESTION, DOCS) == plain.generate(QUESTION, DOCS)
    assert plain_model.batches  # without the store every sentence was embedded
    assert model.batches == []  # with it, none was
    assert model.queries == [QUESTION]


def test_a_missing_store_falls_back_to_embedding_and_is_read_once_it_appears(tmp_path):
    path = tmp_path / "later" / "v.sqlite3"
    model = CountingEmbeddings()
    wrapped = StoredSentenceEmbeddings(model, SentenceVectorStore(path, IDENTITY))
    assert len(wrapped.embed_documents(["one text"])) == 1
    assert model.batches == [["one text"]] and not path.exists()  # reading creates nothing
    filled_store(path, ["one text"])
    wrapped.embed_documents(["one text"])
    assert model.batches == [["one text"]]  # the store written since is read


@pytest.mark.parametrize("content", [b"", b"not a database at all " * 200])
def test_a_corrupt_store_reads_as_empty_and_a_write_starts_it_again(tmp_path, content, caplog):
    path = tmp_path / "v.sqlite3"
    path.write_bytes(content)
    model = CountingEmbeddings()
    wrapped = StoredSentenceEmbeddings(model, SentenceVectorStore(path, IDENTITY))
    generator = ExtractiveGenerator(embeddings=lambda: wrapped, min_similarity=0.3)
    reference = ExtractiveGenerator(embeddings=CountingEmbeddings, min_similarity=0.3)
    assert generator.generate(QUESTION, DOCS) == reference.generate(QUESTION, DOCS)
    assert model.batches == [list(dict.fromkeys(sentences_of(DOCS)))]
    store = SentenceVectorStore(path, IDENTITY)
    assert store.put(["fresh"], [[1.0]]) == 1
    assert store.get(["fresh"])["fresh"].tolist() == [1.0]


def test_vectors_of_another_dimension_under_the_same_name_are_not_mixed_in(tmp_path):
    store = SentenceVectorStore(tmp_path / "v.sqlite3", IDENTITY)
    store.put(["old text"], [[1.0, 2.0, 3.0]])  # another model's vector under this identity
    model = CountingEmbeddings()
    vectors = StoredSentenceEmbeddings(model, store).embed_documents(["old text", "new text"])
    assert [list(v) for v in vectors] == model.embed_documents(["old text", "new text"])


def test_readers_are_not_blocked_and_see_whole_batches_while_a_write_is_open(tmp_path):
    path = tmp_path / "v.sqlite3"
    filled_store(path, ["before"])
    writer = sqlite3.connect(path)
    writer.execute("BEGIN IMMEDIATE")
    writer.executemany(
        "INSERT INTO sentence_vectors (key, vector) VALUES (?, ?)",
        [(sentence_key(IDENTITY, f"row {i}"), np.ones(26, "<f4").tobytes()) for i in range(100)],
    )
    seen: list[set[str]] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            store = SentenceVectorStore(path, IDENTITY)
            seen.append(set(store.get(["before", "row 0", "row 99"])))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=30)
    assert not errors and seen == [{"before"}] * 4  # the open write is invisible, not a wait
    writer.commit()
    writer.close()
    assert set(SentenceVectorStore(path, IDENTITY).get(["before", "row 0", "row 99"])) == {
        "before",
        "row 0",
        "row 99",
    }


def test_concurrent_readers_during_batched_writes_see_only_whole_batches(tmp_path):
    path = tmp_path / "v.sqlite3"
    batches = [[f"batch {b} row {i}" for i in range(200)] for b in range(10)]
    SentenceVectorStore(path, IDENTITY).put(["seed"], [[0.0] * 8])
    done = threading.Event()
    errors: list[BaseException] = []
    partial: list[int] = []

    def write() -> None:
        store = SentenceVectorStore(path, IDENTITY)
        try:
            for batch in batches:
                store.put(batch, np.ones((len(batch), 8), np.float32))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            done.set()

    def read() -> None:
        store = SentenceVectorStore(path, IDENTITY)  # one connection shared by its calls
        try:
            while not done.is_set():
                for batch in batches:
                    found = len(store.get(batch))
                    if found not in (0, len(batch)):
                        partial.append(found)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not partial
    assert SentenceVectorStore(path, IDENTITY).missing([t for b in batches for t in b]) == []


def test_config_sets_where_the_vectors_live_and_null_turns_them_off(tmp_path):
    from parallel_rag.backends.encoders.embeddings import load_embeddings
    from parallel_rag.graph.components import make_generator
    from parallel_rag.graph.loading import parse_config

    config = parse_config({}, extra_retrievers=["a", "b"])
    assert config.generator.sentence_vectors == ".parallel-rag/sentence_vectors.sqlite3"
    generator = make_generator(config.generator, None, config.embeddings, base_dir=tmp_path)
    embeddings = generator.embeddings()
    assert isinstance(embeddings, StoredSentenceEmbeddings)
    assert embeddings.store.path == (tmp_path / ".parallel-rag/sentence_vectors.sqlite3").resolve()
    assert embeddings.inner is load_embeddings()  # queries still go through the shared model
    # no base directory (a generator built outside a graph), or null: the model alone
    assert make_generator(config.generator, None, config.embeddings).embeddings() is (
        load_embeddings()
    )
    off = parse_config({"generator": {"sentence_vectors": None}}, extra_retrievers=["a", "b"])
    assert make_generator(off.generator, None, off.embeddings, base_dir=tmp_path).embeddings() is (
        load_embeddings()
    )
