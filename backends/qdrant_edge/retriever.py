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
from pathlib import Path
from typing import Any, ClassVar, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BackendSpec,
    ChunkBatch,
    DenseStoreRetriever,
    Fingerprint,
    MetadataFilter,
    SettingsStore,
    resolve_path,
    scored_document,
    settings_factory,
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
from parallel_rag.backends.qdrant_edge.writes import (
    MANIFEST_FILE,
    stored_fingerprints,
    write_chunks,
)
from parallel_rag.backends.shared.revisions import current_file_of, current_revision
from pydantic import BaseModel, ConfigDict, Field
from qdrant_edge import Query, QueryRequest

DEFAULT_PATH = ".parallel-rag/qdrant_edge"
PASSAGE_OVERFETCH = 4  # points asked per chunk wanted when chunks have passages
DEFAULT_SENTENCE_WEIGHT = 0.5
DEFAULT_SENTENCE_SEGMENT_MB = 128
"""With half-precision vectors, 128 MB holds the 175k 384-dimension vectors that 256 MB held at
float32: the same segments to search, half the pages a write maps (bench/INGEST-RESULTS.md)."""
DEFAULT_SEGMENT_MB = 64
"""Half the sentence shard's: a passage point carries its chunk's text and metadata (about 1 KB,
more than its vector), so at the same vector count its segment is the largest thing a write
rebuilds: past 150k chunks its merges set a 100k-document ingest's peak (2.1-2.2 GB at 128 MB,
bench/INGEST-RESULTS.md)."""


class PassageSettings(BaseModel):
    """How a long chunk is split for the dense index: windows of ``max_tokens`` word pieces
    (measured with the embedding model's tokenizer, its special tokens included) starting every
    ``stride`` word pieces (windows cut between words), the last one ending with the text; the
    chunk's title (its ``title`` metadata, or a short first line) leads every passage.

    With ``sentence_weight`` above 0 each chunk's sentences (``split_sentences``) are embedded
    too, and a chunk is scored by its best passage and its best sentence together: a short
    query that restates one sentence of a long chunk (a claim and its evidence) matches that
    sentence better than any 256-word-piece window around it."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(
        default=None,
        ge=32,
        description="word pieces per passage; default: what the model reads (256 for MiniLM)",
    )
    stride: int | None = Field(
        default=None,
        gt=0,
        description="word pieces between passage starts; default: a whole passage (no overlap "
        "but for the last passage, which ends with the text)",
    )
    sentence_weight: float = Field(
        default=DEFAULT_SENTENCE_WEIGHT,
        ge=0,
        le=1,
        description="a chunk's score is (1 - w) x its best passage's similarity + w x its best "
        "sentence's; its sentences are embedded at ingest into a second shard. 0.5 wins on the "
        "training splits (bench/FUSION-RESULTS.md); 0: no sentence vectors, best passage only",
    )


class QdrantEdgeSettings(BaseModel):
    """``backend_config`` of a ``qdrant_edge`` retriever."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(default=DEFAULT_PATH, min_length=1)
    collection: str = Field(default="parallel_rag", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    hnsw_ef: int = Field(
        default=256,
        gt=0,
        description="candidates kept while searching (256: recall@10 0.978 against exact "
        "search at 1M clustered vectors, where 128 gives 0.892, for about 0.1 ms more)",
    )
    m: int = Field(default=16, gt=0, description="HNSW edges per node")
    ef_construct: int = Field(
        default=200,
        gt=0,
        description="candidates while building the passage index (200: at 1M clustered vectors "
        "100 leaves some points out of every search's reach, recall@10 0.978 against exact "
        "search, where 200 gives 1.000, for about twice that shard's build time)",
    )
    sentence_ef_construct: int = Field(
        default=100,
        gt=0,
        description="candidates while building the sentence index (with a sentence weight "
        "above 0). It holds several points a chunk but only proposes candidates (every "
        "candidate's passage and sentence scores are then computed exactly), so it gets a "
        "cheaper build than the passage index",
    )
    candidates: int = Field(
        default=4,
        gt=0,
        description="with a sentence weight above 0: chunks the passage search, and sentences "
        "the sentence search, propose per result wanted; every proposed chunk is then scored "
        "exactly. A chunk of the mixed top k often ranks below k by its best passage alone, "
        "and a chunk of several passages or sentences fills several hits",
    )
    quantization: Literal["int8"] | None = Field(
        default="int8",
        description="a copy of every vector as 8-bit integers, held in memory, that the index "
        "searches on; the hits are then rescored with the stored vectors. The searches "
        "of a large collection read a quarter of the memory: at 1M chunks x 5 sentences the "
        "sentence index is 7.2 GB of float32 vectors, and a query reading parts of it no query "
        "of the process had read took 45-65 ms where the 8-bit copy takes a few. null: search the "
        "stored vectors themselves",
    )
    oversampling: float = Field(
        default=2.0,
        ge=1,
        description="with quantization: hits rescored with the stored vectors per hit wanted "
        "(at 1M vectors, 1: recall@10 0.95 against exact search; 2: 1.00)",
    )
    vector_datatype: Literal["float16", "float32"] = Field(
        default="float16",
        description="how a new collection stores its vectors. float16 halves the pages a write "
        "maps and a reader holds, at scores within about 1e-4 of float32's (the search runs on "
        "the 8-bit copy either way; the stored vectors only rescore it). A collection keeps "
        "the type it was created with: delete its folder and ingest again to change it",
    )
    segment_mb: int | None = Field(
        default=DEFAULT_SEGMENT_MB,
        ge=16,
        description="the largest segment a write builds in the chunk (passage) index, in MB of "
        "stored vectors: a write merges its points into segments up to this size, so it reads "
        "and rewrites at most about this much whatever the collection's size (what still "
        "grows is the engine's in-memory table of its points' ids, about 0.05 KB a point; "
        "the payload indexes are kept on disk); a search visits every segment, so fewer, "
        "larger ones search faster (about 1 ms a segment at 100k chunks). Smaller than the "
        "sentence index's because a passage also stores its chunk's text and metadata, more "
        "bytes than its vector. null: the "
        "engine's own merging, whose segments grow with the collection, so a write may read "
        "and rewrite most of it",
    )
    sentence_segment_mb: int | None = Field(
        default=DEFAULT_SENTENCE_SEGMENT_MB,
        ge=16,
        description="``segment_mb`` for the sentence index (with a sentence weight above 0): "
        "its points hold a vector and a chunk's id and metadata, and there are several a chunk, "
        "so its segments are larger and fewer",
    )
    full_scan_threshold_kb: int = Field(
        default=10_000,
        ge=0,
        description="segments smaller than this, in KB of float32 vectors (a count of vectors "
        "whatever ``vector_datatype``: 10,000 is 6,666 of 384 dimensions), are searched "
        "exactly; the engine indexes a segment from the same size",
    )
    passages: PassageSettings | None = Field(
        default_factory=PassageSettings,
        description="index chunks longer than the model reads as several passages, a chunk "
        "scored by its best passage (the default: it wins on the training splits); null: one "
        "vector per chunk, the model reading only its start",
    )

    def store_dir(self, base_dir: Path | None = None) -> Path:
        return resolve_path(self.path, base_dir).resolve() / self.collection


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
            sentence_vectors=self.context.sentence_vectors,
        )


BACKEND = BackendSpec(
    name="qdrant_edge",
    settings=QdrantEdgeSettings,
    factory=settings_factory(QdrantEdgeRetriever),
    kind=QdrantEdgeRetriever.retrieval_kind,
    store=QdrantEdgeStore,
    locations=current_file_of,
    evaluable=True,
)
