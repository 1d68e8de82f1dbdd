"""The ``backend_config`` of a ``qdrant_edge`` retriever (and its passage settings): pydantic and
the standard library only, so the configuration schema holds it without importing Qdrant Edge's
bindings, numpy or the encoders (``retriever.py`` and its ``search``/``writes``/``points``
modules do, when a configuration builds a ``qdrant_edge`` branch or writes its store)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from parallel_rag.backends.base import resolve_path
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PATH = ".parallel-rag/qdrant_edge"


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

    model_config = ConfigDict(extra="forbid", defer_build=True)

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

    model_config = ConfigDict(extra="forbid", defer_build=True)

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
