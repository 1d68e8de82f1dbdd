"""Pair scorers for the per-branch ``rerank`` node. Each loads its model once per process.

``embedding``: cosine similarity between the query and each candidate under the embedding model
(the packaged all-MiniLM-L6-v2 by default): runs offline with real, meaningful scores.
"""

from __future__ import annotations

import numpy as np
from parallel_rag.backends.embeddings import BUNDLED, embedding_identity, load_embeddings


class EmbeddingSimilarityScorer:
    """Re-scores candidates by embedding cosine similarity with the query."""

    def __init__(self, model: str = BUNDLED, device: str = "cpu"):
        self.model = model
        self.device = device

    @property
    def identity(self) -> str:
        return f"embedding:{embedding_identity(self.model)}"

    def score(self, query: str, documents: list[str]) -> list[float]:
        if not documents:
            return []
        embeddings = load_embeddings(self.model, self.device)
        query_vector = np.asarray(embeddings.embed_query(query))
        doc_vectors = np.asarray(embeddings.embed_documents(documents))
        norms = np.linalg.norm(doc_vectors, axis=1) * np.linalg.norm(query_vector)
        return (doc_vectors @ query_vector / np.where(norms == 0, 1, norms)).tolist()
