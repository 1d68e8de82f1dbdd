"""Queries of the bundled MiniLM on ONNX Runtime: the same vectors as the torch model; documents
on the chosen document encoder (ONNX Runtime or bf16 torch) within 1e-4 cosine of the torch
model's whatever their batch, on the int8 encoder within 0.03; a fallback to torch
when ONNX is unavailable or differs, to float32 when the int8 graph does."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from parallel_rag.backends.encoders.embeddings import (
    BF16_BATCH,
    BF16_ROW_STEP,
    BF16_WIDTH_STEP,
    DOCUMENT_ENCODER_ENV,
    RUNTIME_ENV,
    Bf16DocumentEmbeddings,
    amx_bf16,
    bundled_model_path,
    document_encoder,
    load_embeddings,
)
from parallel_rag.backends.encoders.onnx_query import (
    ARENA_SHRINKAGE,
    DOCUMENT_BATCH,
    OnnxQueryEmbeddings,
    onnx_query_embeddings,
)

TEXTS = [
    "What causes antibiotic resistance in hospital bacteria?",
    "x",
    "tab\tand\nnewline, Ünïcode and 中文 in one question?",
    " ".join(["A long passage that runs past the model's 256-token limit."] * 60),
]


@pytest.fixture(scope="module", autouse=True)
def torch_runtime():
    """This module tests the torch extra's path: the suite's default runtime is ONNX (conftest)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RUNTIME_ENV, "torch")
        yield


@pytest.fixture(scope="module")
def torch_model():
    model = load_embeddings().inner.inner  # QueryOnce -> ONNX wrapper -> (bf16 ->) HuggingFace
    return model.inner if isinstance(model, Bf16DocumentEmbeddings) else model


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


def test_document_vectors_match_torch_whatever_their_batch(torch_model):
    """The shipped encoder's document vectors: within 1e-4 cosine of torch's on the float
    encoders, 0.03 on int8; a text's vector the same whatever else is in its call."""
    fast = load_embeddings().inner
    texts = TEXTS + [f"sentence number {i} of a short batch." for i in range(40)]
    reference = np.asarray(torch_model.embed_documents(texts))
    together = np.asarray(fast.embed_documents(texts))
    alone = np.asarray([fast.embed_documents([t])[0] for t in TEXTS])
    assert together.shape == reference.shape
    gap = 0.03 if document_encoder() == "int8" else 1e-4
    assert np.einsum("ij,ij->i", together, reference).min() > 1 - gap
    assert np.einsum("ij,ij->i", alone, together[: len(TEXTS)]).min() > 1 - 1e-4
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1, atol=1e-4)
    assert fast.embed_documents([]) == []


@pytest.mark.parametrize("encoder", ["onnx", "bf16", "torch"])
def test_each_document_encoder_gives_the_torch_vectors(torch_model, encoder):
    texts = TEXTS[:3]
    if encoder == "onnx":
        model = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True)
        assert model.documents_on_onnx
    elif encoder == "bf16":
        model = Bf16DocumentEmbeddings(torch_model)
    else:
        model = onnx_query_embeddings(torch_model, bundled_model_path())
        assert not model.documents_on_onnx
    got = np.asarray(model.embed_documents(texts))
    reference = np.asarray(torch_model.embed_documents(texts))
    assert np.einsum("ij,ij->i", got, reference).min() > 1 - 1e-4


def test_bf16_batches_have_a_few_shapes_and_the_same_vectors(torch_model, monkeypatch):
    """torch keeps compiled bfloat16 kernels per input shape: every batch is padded to a
    multiple of the width and row steps, so many calls of varied texts meet a bounded set of
    shapes, and the padding changes no vector."""
    model = Bf16DocumentEmbeddings(torch_model)
    client = torch_model._client
    shapes = []
    forward = client.forward

    def spy(features, *args, **kwargs):
        shapes.append(tuple(features["input_ids"].shape))
        return forward(features, *args, **kwargs)

    monkeypatch.setattr(client, "forward", spy)
    words = "cells divide when the signal pathway is active in tissue".split()
    texts = [" ".join(words[j % len(words)] for j in range(5 + 3 * i)) for i in range(70)]
    got = np.asarray(model.embed_documents(texts))
    assert shapes and all(w % BF16_WIDTH_STEP == 0 for _, w in shapes)
    assert all(r == BF16_BATCH or r % BF16_ROW_STEP == 0 for r, _ in shapes)
    full, rest = divmod(len(texts), BF16_BATCH)  # the last rows padded to a multiple of 16
    assert [r for r, _ in shapes] == [BF16_BATCH] * full + [-(-rest // BF16_ROW_STEP) * 16]
    monkeypatch.setattr(client, "forward", forward)
    reference = np.asarray(torch_model.embed_documents(texts))
    assert got.shape == reference.shape
    assert np.einsum("ij,ij->i", got, reference).min() > 1 - 1e-4
    alone = np.asarray([model.embed_documents([t])[0] for t in texts[::17]])
    assert np.einsum("ij,ij->i", alone, got[::17]).min() > 1 - 1e-4


def test_the_query_session_is_made_on_the_first_query_only(torch_model, monkeypatch):
    """An ingest embeds documents and never a query: with a document session, the one-thread
    query session (about 100 MB) waits for a query, then gives the torch vectors."""
    import parallel_rag.backends.encoders.onnx_query as onnx_query

    made = []
    real = onnx_query._session

    def counting(onnxruntime, path, threads):
        made.append(threads)
        return real(onnxruntime, path, threads)

    monkeypatch.setattr(onnx_query, "_session", counting)
    model = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True)
    assert model.documents_on_onnx
    model.embed_documents(TEXTS)
    assert len(made) == 1  # the document session only
    with ThreadPoolExecutor(4) as pool:
        vectors = list(pool.map(model.embed_query, TEXTS * 2))
    assert len(made) == 2  # one query session, however many first queries at once
    reference = np.asarray([torch_model.embed_query(t) for t in TEXTS * 2])
    assert np.einsum("ij,ij->i", np.asarray(vectors), reference).min() > 1 - 1e-5


def test_each_document_call_gives_the_arena_back_once(torch_model):
    """ONNX Runtime's arena keeps the most any call needed unless a run asks it to shrink:
    the last run of every document call asks (once, so the other runs reuse the arena)."""
    model = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True)
    session = model._document_session
    asked = []

    class Recording:
        def run(self, names, feed, options=None):
            asked.append(
                options is not None and options.get_run_config_entry(ARENA_SHRINKAGE) == "cpu:0"
            )
            return session.run(names, feed, options)

    model._document_session = Recording()
    texts = [
        f"sentence {i} about a protein that binds calcium" for i in range(2 * DOCUMENT_BATCH + 5)
    ]
    got = np.asarray(model.embed_documents(texts))
    assert asked == [False, False, True]
    model._document_session = session
    np.testing.assert_allclose(got, np.asarray(model.embed_documents(texts)), atol=1e-6)


def test_document_encoder_choice(monkeypatch):
    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, "ONNX")
    assert document_encoder() == "onnx"
    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, "auto")
    assert document_encoder() == ("bf16" if amx_bf16() else "int8")
    monkeypatch.delenv(DOCUMENT_ENCODER_ENV)
    assert document_encoder() == ("bf16" if amx_bf16() else "int8")
    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, " Int8 ")
    assert document_encoder() == "int8"
    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, "fp8")
    with pytest.raises(ValueError, match="PARALLEL_RAG_DOCUMENT_ENCODER"):
        document_encoder()


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


def cosines(a, b) -> np.ndarray:
    return np.einsum("ij,ij->i", np.asarray(a), np.asarray(b))


def test_int8_encoder_runs_documents_on_int8_one_text_a_run(torch_model):
    """Sentences and chunks on the int8 graph: close to the torch vectors, not equal to them
    (so int8 really ran), and a text's vector is the same whatever else is in its call."""
    model = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True, int8=True)
    assert model.documents_on_int8
    texts = TEXTS + [f"Protein {i} binds calcium in the membrane." for i in range(40)]
    got = model.embed_documents(texts)
    reference = torch_model.embed_documents(texts)
    near = cosines(got, reference)
    assert near.min() > 0.97 and near.mean() > 0.985
    assert near.max() < 1 - 1e-4
    alone = [model.embed_documents([t])[0] for t in texts[::7]]
    np.testing.assert_allclose(alone, np.asarray(got)[::7], atol=1e-6)
    assert model.embed_documents([]) == []
    # queries stay float32 on the float32 graph
    assert float(np.asarray(model.embed_query(TEXTS[0])) @ reference[0]) > 1 - 1e-5


def test_an_int8_graph_that_moves_vectors_too_far_is_refused(torch_model, monkeypatch, tmp_path):
    """A graph quantized per tensor (about four times as far from torch as per channel) fails
    the probe bound: short documents then run in float32."""
    import parallel_rag.backends.encoders.onnx_query as onnx_query
    from onnxruntime.quantization import QuantType, quantize_dynamic

    per_tensor = tmp_path / "per-tensor.onnx"
    source = onnx_query.exported_graph(bundled_model_path())
    quantize_dynamic(str(source), str(per_tensor), weight_type=QuantType.QInt8)
    monkeypatch.setattr(onnx_query, "quantized_graph", lambda model_dir: per_tensor)
    model = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True, int8=True)
    assert model.documents_on_onnx and not model.documents_on_int8
    got = model.embed_documents(TEXTS)
    assert cosines(got, torch_model.embed_documents(TEXTS)).min() > 1 - 1e-4


def test_int8_falls_back_to_float32_when_quantization_fails(torch_model, monkeypatch, tmp_path):
    import parallel_rag.backends.encoders.onnx_query as onnx_query

    monkeypatch.setattr(onnx_query, "quantized_graph", lambda model_dir: tmp_path / "q.onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)  # import fails
    model = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True, int8=True)
    assert model.documents_on_onnx and not model.documents_on_int8
    assert not (tmp_path / "q.onnx").exists()
    assert (
        cosines(model.embed_documents(TEXTS), torch_model.embed_documents(TEXTS)).min() > 1 - 1e-4
    )


def test_the_int8_choice_loads_the_int8_encoder(monkeypatch):
    """``PARALLEL_RAG_DOCUMENT_ENCODER=int8`` through the shared loader: queries on ONNX in
    float32, documents on int8, no bf16 wrapper."""
    from parallel_rag.backends.encoders.embeddings import _load

    monkeypatch.setenv(DOCUMENT_ENCODER_ENV, "int8")
    model = _load.__wrapped__("bundled", "cpu", "torch").inner
    assert isinstance(model, OnnxQueryEmbeddings) and model.documents_on_int8
    assert not isinstance(model.inner, Bf16DocumentEmbeddings)
