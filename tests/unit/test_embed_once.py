"""A query view is embedded once per request however many dense branches (and the generator)
use it: a counting embedder behind the shared model sees each query text once."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from parallel_rag.backends.encoders import embeddings as shared
from parallel_rag.backends.encoders.embeddings import QueryOnceEmbeddings
from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeSettings
from parallel_rag.backends.qdrant_edge.writes import write_chunks as write_edge
from parallel_rag.backends.vectorstore.retriever import store_path
from parallel_rag.backends.vectorstore.retriever import write_chunks as write_managed
from parallel_rag.graph import build_graph
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences

DIM = 16
WORDS = ["bridge", "comet", "river", "engine", "tower", "planet", "steel", "orbit"]


class CountingEmbedder(Embeddings):
    """Bag-of-words vectors; counts every text it embeds as a query."""

    def __init__(self) -> None:
        self.queries: Counter[str] = Counter()
        self.lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        v = np.zeros(DIM, dtype=np.float32)
        for word in text.lower().split():
            v[hash(word.strip("?.,")) % DIM] += 1
        v[-1] += 0.01
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        with self.lock:
            self.queries[text] += 1
        time.sleep(0.02)  # long enough for concurrent branches to overlap
        return self.vector(text)


def test_concurrent_callers_share_one_embedding():
    inner = CountingEmbedder()
    model = QueryOnceEmbeddings(inner)
    results: list[list[float]] = []
    threads = [
        threading.Thread(target=lambda: results.append(model.embed_query("same text")))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert inner.queries["same text"] == 1
    assert all(r == results[0] for r in results)
    model.embed_query("same text")
    assert inner.queries["same text"] == 1


def test_the_oldest_queries_are_forgotten_first():
    inner = CountingEmbedder()
    model = QueryOnceEmbeddings(inner, size=2)
    for text in ("a", "b", "a", "c", "a", "b"):
        model.embed_query(text)
    assert inner.queries == Counter({"a": 1, "b": 2, "c": 1})


@pytest.fixture
def counting(monkeypatch):
    inner = CountingEmbedder()
    monkeypatch.setattr(shared, "_load", lambda model, device, runtime: wrapped)
    wrapped = QueryOnceEmbeddings(inner)
    return inner


def test_one_request_embeds_its_query_once_across_dense_branches(counting, tmp_path):
    texts = [f"The {a} and the {b}" for a in WORDS for b in WORDS if a != b]
    ids = [f"chunk-{i}" for i in range(len(texts))]
    metadatas = [{"file_id": "f", "source": "s.md"} for _ in texts]
    vectors = counting.embed_documents(texts)
    write_edge(
        QdrantEdgeSettings(path="edge"),
        tmp_path,
        ids=ids,
        texts=texts,
        metadatas=metadatas,
        vectors=vectors,
        replace_file_ids=[],
        sentences=GeneratorSentences("bundled"),
    )
    write_managed(
        store_path(".parallel-rag/vector_stores", "kb", tmp_path),
        ids=ids,
        texts=texts,
        metadatas=metadatas,
        vectors=vectors,
        replace_file_ids=[],
    )
    config = parse_config(
        {
            "retrievers": [
                {"name": "edge", "backend": "qdrant_edge", "backend_config": {"path": "edge"}},
                {"name": "edge2", "backend": "qdrant_edge", "backend_config": {"path": "edge"}},
                {
                    "name": "kb",
                    "backend": "vectorstore",
                    "backend_config": {"vector_store_id": "kb"},
                },
            ],
            "generator": {"min_similarity": None},
        }
    )
    graph = build_graph(config, base_dir=tmp_path)
    question = "Which bridge crosses the river?"
    result = graph.invoke({"query": question, "top_k": 3})
    assert {b["status"] for b in result["branches"]} == {"ok"}
    assert len(result["branches"]) == 3
    assert counting.queries[question] == 1
