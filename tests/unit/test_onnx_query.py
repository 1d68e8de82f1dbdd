"""Queries of the bundled MiniLM on ONNX Runtime: the same vectors as the torch model, the
torch path kept for documents, and a fallback to torch when ONNX is unavailable or differs."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from parallel_rag.backends.embeddings import bundled_model_path, load_embeddings
from parallel_rag.backends.onnx_query import (
    OnnxQueryEmbeddings,
    onnx_query_embeddings,
)

TEXTS = [
    "What causes antibiotic resistance in hospital bacteria?",
    "x",
    "tab\tand\nnewline, Ünïcode and 中文 in one question?",
    " ".join(["A long passage that runs past the model's 256-token limit."] * 60),
]


@pytest.fixture(scope="module")
def torch_model():
    return load_embeddings().inner.inner  # QueryOnce -> ONNX wrapper -> HuggingFaceEmbeddings


def test_bundled_model_embeds_queries_on_onnx():
    model = load_embeddings()
    assert isinstance(model.inner, OnnxQueryEmbeddings)
    # attributes of the LangChain model stay reachable (the reranker reads its SentenceTransformer)
    assert model._client is model.inner.inner._client


def test_onnx_query_vectors_match_torch(torch_model):
    fast = load_embeddings().inner
    for text in TEXTS:
        onnx_vector = np.asarray(fast.embed_query(text))
        torch_vector = np.asarray(torch_model.embed_query(text))
        assert onnx_vector.shape == (384,)
        assert float(onnx_vector @ torch_vector) > 1 - 1e-5
        assert abs(float(np.linalg.norm(onnx_vector)) - 1) < 1e-5


def test_documents_stay_on_torch(torch_model):
    fast = load_embeddings().inner
    assert fast.embed_documents(TEXTS[:2]) == torch_model.embed_documents(TEXTS[:2])


def test_concurrent_queries_and_documents_give_the_sequential_vectors(torch_model):
    fast = load_embeddings().inner
    texts = [f"{t} ({i})" for i in range(6) for t in TEXTS[:3]]
    expected = [fast.embed_query(t) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        docs = pool.submit(fast.embed_documents, TEXTS * 4)
        got = list(pool.map(fast.embed_query, texts))
        docs.result()
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-6)


class Negated:
    """The torch model with every query vector negated: an ONNX graph can never match it."""

    def __init__(self, inner):
        self.inner = inner
        self._client = inner._client

    def embed_query(self, text):
        return [-x for x in self.inner.embed_query(text)]


def test_falls_back_when_vectors_differ(torch_model):
    assert onnx_query_embeddings(Negated(torch_model), bundled_model_path()) is None


def test_falls_back_without_onnxruntime(torch_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    assert onnx_query_embeddings(torch_model, bundled_model_path()) is None
