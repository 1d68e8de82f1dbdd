"""The bench's embedding cache keeps each encoder's vectors apart, and on the int8 encoder a
query's vector (float32, as the product embeds queries) apart from the same text's document
vector (int8), so quality rows measure what the product would."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from parallel_rag.backends.encoders.embeddings import BUNDLED, DOCUMENT_ENCODER_ENV

# bench/ is not an installed package: load the one module (it imports only parallel_rag)
_SOURCE = Path(__file__).resolve().parents[2] / "bench" / "embedding_cache.py"
_SPEC = importlib.util.spec_from_file_location("bench_embedding_cache", _SOURCE)
embedding_cache = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(embedding_cache)
EmbeddingCache = embedding_cache.EmbeddingCache
cache_name = embedding_cache.cache_name
separate_queries = embedding_cache.separate_queries


class TwoWays:
    """A model whose query vector of a text differs from its document vector."""

    def __init__(self):
        self.calls = []

    def embed_documents(self, texts):
        self.calls += [("document", t) for t in texts]
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text):
        self.calls.append(("query", text))
        return [0.0, 1.0]


def test_each_encoder_has_its_own_folder(monkeypatch):
    names = {}
    for encoder in ("onnx", "torch", "bf16", "int8"):
        monkeypatch.setenv(DOCUMENT_ENCODER_ENV, encoder)
        names[encoder] = cache_name(BUNDLED)
    assert names["onnx"] == names["torch"]  # float32 either way: one folder
    assert len({names["onnx"], names["bf16"], names["int8"]}) == 3
    assert cache_name("some/other-model") == "some--other-model"


def test_int8_queries_are_kept_apart_from_documents(monkeypatch, tmp_path):
    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, "int8")
    assert separate_queries(BUNDLED)
    model = TwoWays()
    cache = EmbeddingCache(tmp_path)
    cache.model_object = lambda: model
    assert cache.vectors(["a sentence"]).tolist() == [[1.0, 0.0]]
    assert cache.query_vector("a sentence").tolist() == [0.0, 1.0]
    assert cache.query_vector("a sentence").tolist() == [0.0, 1.0]  # kept
    assert model.calls == [("document", "a sentence"), ("query", "a sentence")]
    cache.flush()
    again = EmbeddingCache(tmp_path)  # both read back from the shards
    again.model_object = lambda: None
    assert again.query_vector("a sentence").tolist() == [0.0, 1.0]
    assert again.vectors(["a sentence"]).tolist() == [[1.0, 0.0]]


def test_float_encoders_share_a_text_s_vector(monkeypatch, tmp_path):
    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, "onnx")
    assert not separate_queries(BUNDLED)
    model = TwoWays()
    cache = EmbeddingCache(tmp_path)
    cache.model_object = lambda: model
    cache.vectors(["a sentence"])
    assert cache.query_vector("a sentence").tolist() == [1.0, 0.0]
    assert model.calls == [("document", "a sentence")]
