"""``qdrant_edge``: Qdrant's own engine in-process (``qdrant-edge-py``): an HNSW index with
payload filters, on disk, no server. Kind: **dense**. ``similarity_threshold`` becomes the
search's ``score_threshold`` (cosine similarity).

The embedded dense store for corpora past a few thousand chunks: at 100k clustered 384-d
vectors a search takes about a millisecond at recall@10 1.0 against exact search (see
``bench/ANN-RESULTS.md``), where Qdrant local mode scans every vector. Small collections (below
``full_scan_threshold_kb``) are searched exactly. An indexed segment keeps an 8-bit copy of its
vectors in memory (``quantization``) that the index walks; the hits are rescored with the stored
vectors, so every score returned is the stored vectors' own. For several processes writing at
once, or a corpus that outgrows one machine, move to a Qdrant server (the ``qdrant`` backend with
``url:``).

Layout under ``path`` (default ``.parallel-rag/qdrant_edge``)::

    COLLECTION/CURRENT               the live revision's directory name (replaced atomically)
    COLLECTION/<revision>/           one Qdrant Edge shard (segments, WAL, its config)
    COLLECTION/<revision>/parallel_rag.json   embedding identity, dimension, chunk count
    COLLECTION/<revision>/sentences/          the chunks' sentence vectors, a second shard
                                              (with ``passages.sentence_weight`` above 0)

Readers never open the shard being written: a write copies the live revision into a staging
directory, applies the deletes and upserts there, builds the index, flushes, and publishes it
through ``atomic_files`` (rename, then ``CURRENT``). Readers, in this process or others, keep
answering from the revision they hold until they see the new ``CURRENT``; a writer killed
halfway leaves only a staging directory, removed by the next write. Since a revision is
complete before anyone reads it, shards are written without a WAL (which would also lock a
shard to one process).
Writers take a file lock. Points carry ``{"id", "content", "metadata"}``; the point id is the
chunk id when it is a UUID, else a UUID derived from it, and results carry the chunk id.

This module holds the settings, the retriever and ingest's store; the rest is in three
siblings: ``qdrant_edge_points`` (chunks as points: ids, passages, sentences),
``qdrant_edge_writes`` (publishing a revision) and ``qdrant_edge_search`` (the open revision
and the mixed passage and sentence score).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    ChunkBatch,
    DenseStoreRetriever,
    Fingerprint,
    MetadataFilter,
    SettingsStore,
    scored_document,
)
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.qdrant_edge.search import (
    RANKING_PAYLOAD,
    OpenRevision,
    best_per_chunk,
    chunk_records,
    edge_filter,
    mixed_scores,
    open_revision,
    scored_hit,
    search_params,
    sentence_weight,
)
from parallel_rag.backends.qdrant_edge.settings import (
    DEFAULT_PATH,
    DEFAULT_SEGMENT_MB,
    DEFAULT_SENTENCE_SEGMENT_MB,
    DEFAULT_SENTENCE_WEIGHT,
    PassageSettings,
    QdrantEdgeSettings,
)
from parallel_rag.backends.qdrant_edge.writes import (
    MANIFEST_FILE,
    stored_fingerprints,
    write_chunks,
)
from parallel_rag.backends.shared.revisions import current_revision
from pydantic import Field
from qdrant_edge import Query, QueryRequest

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "DEFAULT_PATH",
    "DEFAULT_SENTENCE_WEIGHT",
    "DEFAULT_SENTENCE_SEGMENT_MB",
    "DEFAULT_SEGMENT_MB",
    "PassageSettings",
    "QdrantEdgeSettings",
]

PASSAGE_OVERFETCH = 4  # points asked per chunk wanted when chunks have passages


class QdrantEdgeRetriever(DenseStoreRetriever):
    """Dense retriever over a Qdrant Edge collection; usable alone in any LangChain chain."""

    reads_revisions: ClassVar[bool] = True  # held for a graph run: revisions.py

    settings: QdrantEdgeSettings = Field(default_factory=QdrantEdgeSettings)

    def warm_up(self) -> None:
        """Open the live revision now: loading a shard reads its vectors, the 8-bit copies
        and the payloads into memory (see ``SearchKwargsRetriever.warm_up``)."""
        open_revision(self.settings.store_dir(self.base_dir))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        held = open_revision(self.settings.store_dir(self.base_dir))
        store = f"Qdrant Edge collection '{self.settings.collection}'"
        self.check_built_with(held.manifest["embedding"], store)
        embedded = load_embeddings(self.embedding_model, self.device).embed_query(query)
        vector = [float(x) for x in embedded]
        k = k or self.k
        weight = sentence_weight(held)
        # a sentence-weighted score is settled after the search: no threshold on the passages
        threshold = None if weight else self.score_threshold
        if weight:
            wanted = limit = k * self.settings.candidates
        else:  # a chunk indexed as passages has several points: ask for more
            wanted, limit = k, k * PASSAGE_OVERFETCH if held.manifest.get("passages") else k
        best = self._best_passages(held, vector, wanted, limit, filters, threshold)
        if weight:
            found = [scored_hit(hit) for hit in best.values()]
            ranked = mixed_scores(held, vector, found, k, filters, weight, self.settings)
            if self.score_threshold is not None:
                ranked = [h for h in ranked if h["score"] >= self.score_threshold]
            top = ranked[:k]
        else:
            top = [scored_hit(hit) for hit in list(best.values())[:k]]
        records = chunk_records(held.shard, [h["id"] for h in top if h["content"] is None])
        documents = []
        for h in top:
            content, metadata = h["content"], h["metadata"]
            if content is None:
                record = records.get(h["id"], {})
                content, metadata = record.get("content", ""), record.get("metadata") or {}
            documents.append(scored_document(h["id"], content, metadata or {}, h["score"]))
        return documents

    def _best_passages(
        self,
        held: OpenRevision,
        vector: list[float],
        wanted: int,
        limit: int,
        filters: MetadataFilter | None,
        threshold: float | None,
    ) -> dict[str, Any]:
        """The best ``wanted`` or more chunks by their best passage (chunk id -> that hit):
        ``limit`` points first, twice as many while they collapse to fewer chunks."""
        total = held.manifest.get("chunks") or limit
        while True:
            hits = held.shard.query(
                QueryRequest(
                    limit=limit,
                    query=Query.Nearest(vector),
                    filter=edge_filter(filters),
                    score_threshold=threshold,
                    params=search_params(self.settings, limit),
                    with_payload=RANKING_PAYLOAD,
                )
            )
            best = best_per_chunk(hits)
            if len(best) >= wanted or len(hits) < limit or limit >= total:
                return best
            limit = min(limit * 2, total)


class QdrantEdgeStore(SettingsStore):
    """Ingest's writer for a Qdrant Edge collection."""

    def open(self) -> None:
        """Nothing to take ahead: a write holds the collection's file lock while it runs and
        removes what a killed writer left."""

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint] | None:
        """None (write every file again) when the collection was split into passages
        differently from what the settings now ask."""
        directory = self.settings.store_dir(self.context.base_dir)
        revision = current_revision(directory)
        if revision is not None:
            wanted = self.settings.passages.model_dump() if self.settings.passages else None
            manifest = json.loads((directory / revision / MANIFEST_FILE).read_text("utf-8"))
            if manifest.get("passages") != wanted:
                return None
        return stored_fingerprints(directory, file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        write_chunks(
            self.settings,
            self.context.base_dir,
            **batch.columns(),
            replace_file_ids=replace_file_ids,
            embedding_model=self.context.embedding_model,
            device=self.context.device,
            sentences=self.context.sentences,
        )
