"""On-disk cache of embedding vectors, keyed by model identity + SHA-256 of the text.

Encoding is the bottleneck of every dense figure on a small CPU (all-MiniLM-L6-v2 encodes a few
SciFact abstracts a second here), so the harness computes each text's vector once and keeps it
under ``bench/out/cache/embeddings/<model>/`` as ``.npy`` shards (``*.keys.npy`` holds the text
hashes, ``*.vectors.npy`` the float32 rows). The Qdrant and Milvus stores, the
``EnsembleRetriever`` baseline and the embedding reranker all read the same vectors.

``CachedEmbeddings`` is a LangChain ``Embeddings`` over the cache: a miss is encoded by the real
model (the one ``parallel_rag.backends.encoders.embeddings.load_embeddings`` returns) and
stored, so the
vectors are exactly the product's. ``install`` points the backends' ``load_embeddings`` at it for
the bench process only.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from parallel_rag.backends.encoders.embeddings import (
    BUNDLED,
    document_encoder,
    embedding_identity,
    load_embeddings,
)

ENCODE_BATCH = 64
QUERY_KEY_PREFIX = "\x00query\x00"  # a query's key, where its vector is not the document's
SHARD_ROWS = 512  # a shard is written every this many new vectors: an interrupted run keeps them


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "--", name).strip("-")


def cache_name(model: str) -> str:
    """The cache folder of ``model``'s vectors: its identity, and for the bundled model on its
    bf16 document encoder a ``--bf16`` suffix (those vectors differ from float32 ones by up to
    1e-4 cosine; the ONNX and torch float32 encoders agree to 1e-6 and share a folder), on its
    int8 one ``--int8``."""
    name = _slug(embedding_identity(model))
    encoder = document_encoder() if model == BUNDLED else None
    return f"{name}--{encoder}" if encoder in ("bf16", "int8") else name


def separate_queries(model: str) -> bool:
    """Whether ``model`` embeds a text as a query differently from a document of the same text:
    the int8 encoder's documents are int8, its queries float32. Elsewhere a short text's
    two vectors agree to 1e-5 and the cache keeps one."""
    return model == BUNDLED and document_encoder() == "int8"


class EmbeddingCache:
    """Vectors of one embedding model, in memory and in ``.npy`` shards on disk."""

    def __init__(self, root: Path, model: str = BUNDLED, device: str = "cpu"):
        self.model = model
        self.device = device
        self.directory = Path(root) / "embeddings" / cache_name(model)
        self.separate_queries = separate_queries(model)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._vectors: dict[str, np.ndarray] = {}
        self._pending: dict[str, np.ndarray] = {}
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0
        self.encode_seconds = 0.0
        self._load_shards()

    def _load_shards(self) -> None:
        for keys_file in sorted(self.directory.glob("*.keys.npy")):
            vectors_file = keys_file.with_name(keys_file.name.replace(".keys.", ".vectors."))
            if not vectors_file.is_file():
                continue
            keys = np.load(keys_file, allow_pickle=False)
            vectors = np.load(vectors_file, allow_pickle=False)
            if len(keys) != len(vectors):
                continue  # a torn shard: its texts are encoded again
            for key, row in zip(keys.tolist(), vectors, strict=True):
                self._vectors[key] = row

    def __len__(self) -> int:
        return len(self._vectors)

    def model_object(self) -> Embeddings:
        return load_embeddings(self.model, self.device)

    def flush(self) -> None:
        """Write the vectors computed since the last flush as one new shard."""
        with self._lock:
            if not self._pending:
                return
            name = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
            keys = np.asarray(list(self._pending), dtype="U64")
            vectors = np.stack(list(self._pending.values())).astype(np.float32)
            np.save(self.directory / f"{name}.vectors.npy", vectors)
            np.save(self.directory / f"{name}.keys.npy", keys)  # keys last: marks it complete
            self._pending.clear()

    def _store(self, key: str, vector: np.ndarray) -> None:
        self._vectors[key] = vector
        self._pending[key] = vector
        if len(self._pending) >= SHARD_ROWS:
            self.flush()

    def alias(self, text: str, same_as: str) -> None:
        """Serve ``text`` with the vector of ``same_as`` (e.g. a truncation the model reads as
        the same tokens). Memory only."""
        with self._lock:
            vector = self._vectors.get(text_key(same_as))
            if vector is not None:
                self._vectors.setdefault(text_key(text), vector)

    def has(self, text: str) -> bool:
        return text_key(text) in self._vectors

    def vectors(
        self,
        texts: Sequence[str],
        *,
        progress: Callable[[int, int], None] | None = None,
        batch_size: int = ENCODE_BATCH,
    ) -> np.ndarray:
        """Float32 matrix of the texts' vectors; misses are encoded (in batches) and stored."""
        keys = [text_key(t) for t in texts]
        with self._lock:
            missing: dict[str, str] = {}
            for key, text in zip(keys, texts, strict=True):
                if key not in self._vectors and key not in missing:
                    missing[key] = text
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            if missing:
                model = self.model_object()
                # length-sorted batches waste little on padding (encoding is the bottleneck)
                items = sorted(missing.items(), key=lambda item: len(item[1]))
                done = 0
                for start in range(0, len(items), batch_size):
                    batch = items[start : start + batch_size]
                    began = time.perf_counter()
                    rows = model.embed_documents([text for _, text in batch])
                    self.encode_seconds += time.perf_counter() - began
                    for (key, _), row in zip(batch, rows, strict=True):
                        self._store(key, np.asarray(row, dtype=np.float32))
                    done += len(batch)
                    if progress is not None:
                        progress(done, len(items))
                self.flush()
            if not keys:
                return np.zeros((0, 0), dtype=np.float32)
            return np.stack([self._vectors[k] for k in keys])

    def query_vector(self, text: str) -> np.ndarray:
        """The vector ``text`` gets as a query: the model's ``embed_query``, kept under a key
        of its own where queries and documents differ (``separate_queries``)."""
        if not self.separate_queries:
            return self.vectors([text])[0]
        key = text_key(QUERY_KEY_PREFIX + text)
        with self._lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self.hits += 1
                return vector
            self.misses += 1
            vector = np.asarray(self.model_object().embed_query(text), dtype=np.float32)
            self._store(key, vector)
            return vector


class CachedEmbeddings(Embeddings):
    """LangChain embeddings served from an ``EmbeddingCache`` (misses go to the real model)."""

    def __init__(self, cache: EmbeddingCache):
        self.cache = cache

    @property
    def _client(self) -> Any:
        """The SentenceTransformer, for callers that read its ``max_seq_length``."""
        return getattr(self.cache.model_object(), "_client", None)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.cache.vectors(list(texts)).tolist() if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.cache.query_vector(text).tolist()


PATCHED_MODULES = (
    "parallel_rag.backends.qdrant.retriever",
    "parallel_rag.backends.milvus.stores",
    "parallel_rag.nodes.rerank.scorers",
    "parallel_rag.backends.vectorstore.retriever",
    "parallel_rag.graph.components",
    "parallel_rag.studio.ingestion",
)


@contextmanager
def installed(cache: EmbeddingCache):
    """Within the block, the backends' ``load_embeddings`` of the cache's model returns the
    cached embeddings (other models load as usual)."""
    import importlib

    cached = CachedEmbeddings(cache)
    original = load_embeddings

    def patched(model: str = BUNDLED, device: str = "cpu") -> Embeddings:
        if model == cache.model:
            return cached
        return original(model, device)

    saved: list[tuple[Any, Any]] = []
    for name in PATCHED_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:  # a backend another engineer is still writing: not needed here
            continue
        if hasattr(module, "load_embeddings"):
            saved.append((module, module.load_embeddings))
            module.load_embeddings = patched
    try:
        yield cached
    finally:
        for module, value in saved:
            module.load_embeddings = value
        cache.flush()


def warm(cache: EmbeddingCache, texts: Iterable[str], label: str, log=print) -> np.ndarray:
    """Encode every text not yet cached, printing progress now and then."""
    texts = list(texts)
    todo = sum(1 for t in dict.fromkeys(texts) if not cache.has(t))
    if todo:
        log(f"[embed] {label}: {todo} of {len(texts)} texts to encode (cached for next time)")
    started = time.perf_counter()
    last = [started]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 30 or done == total:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            log(f"[embed] {label}: {done}/{total} ({rate:.1f} texts/s)")

    return cache.vectors(texts, progress=progress)
