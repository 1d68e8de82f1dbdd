"""Ingest keeps the chunks' vectors as one float32 matrix: exactly what the model computed
(its output is float32), in an eighth of the memory lists of Python floats took."""

from __future__ import annotations

import numpy as np
import pytest
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.studio.ingestion import embed
from parallel_rag.studio.ingestion.chunk import Chunk


def test_chunk_vectors_are_one_float32_matrix_equal_to_the_models_vectors(monkeypatch):
    monkeypatch.setattr(embed, "EMBED_BATCH", 2)  # rows filled across several batches
    texts = ["Statins lower stroke risk.", "Sleep consolidates memory.", "Bridges span rivers."]
    matrix = embed.embed_chunks([Chunk(str(i), t) for i, t in enumerate(texts)], *_model())
    assert matrix.dtype == np.float32 and matrix.shape == (3, 384)
    # other batches pad differently: equal to the model's float32 output within its rounding
    expected = np.asarray(load_embeddings().embed_documents(texts), dtype=np.float64)
    assert np.allclose(matrix.astype(np.float64), expected, rtol=0, atol=1e-6)
    # chunks go to the model shortest first ([2, 1], then [0]): each row back in its chunk's
    # place (a multithreaded encoder may round differently from call to call, by ~1e-8)
    alone = np.asarray([load_embeddings().embed_documents([t])[0] for t in texts])
    assert (np.argmax(matrix @ alone.T, axis=0) == [0, 1, 2]).all()


def test_no_chunk_to_embed_loads_no_model(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a model was loaded with nothing to embed")

    monkeypatch.setattr(embed, "load_embeddings", refuse)
    matrix = embed.embed_chunks([], *_model())
    assert matrix.shape[0] == 0
    with pytest.raises(AssertionError):
        embed.embed_chunks([Chunk("a", "text")], *_model())


def _model() -> tuple[str, str, bool]:
    from parallel_rag.backends.encoders.embeddings import BUNDLED

    return BUNDLED, "cpu", False
