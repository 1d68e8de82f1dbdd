"""Stage 4, embed: the vectors a batch's stores need, computed once for all of them: each chunk
a dense store writes (``EmbeddedChunks``), and the sentences of the batch's chunks that the
extractive generator scores, stored in ``generator.sentence_vectors`` so a serving process
finds them instead of embedding every sentence of every request.

The two are apart because they cost apart: chunks are long (arithmetic-bound), sentences short
and many (about five a chunk); ``bench/ingest_throughput.py --ratio`` times each. A sentence
that is a whole chunk just embedded is stored with that vector, and a sentence already stored
is not embedded again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from parallel_rag.backends.encoders.embeddings import embedding_identity, load_embeddings
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.nodes.generate.sentence_vectors import SentenceVectorStore
from parallel_rag.nodes.generate.sentences import split_sentences
from parallel_rag.studio.ingestion.chunk import Chunk
from parallel_rag.studio.ingestion.defaults import EMBED_BATCH, SENTENCE_BATCH
from tqdm.auto import tqdm


def bars_off(progress: bool) -> bool | None:
    """tqdm's ``disable`` for ``progress``: None (bars on stderr only when it is a terminal, so
    logs and pipes get no carriage-return noise) or True (``--quiet``)."""
    return None if progress else True


@dataclass
class EmbeddedChunks:
    """The chunks a dense store writes and their vectors, one float32 row each."""

    chunks: list[Chunk]
    vectors: np.ndarray

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """The vectors of the chunks ``ids`` (each embedded here), in that order."""
        row_of = {c.id: row for row, c in enumerate(self.chunks)}
        return self.vectors[[row_of[i] for i in ids]]

    def by_text(self) -> dict[str, np.ndarray]:
        """Each embedded chunk's text and vector (a sentence that is a whole chunk reuses it)."""
        return {c.content: self.vectors[row] for row, c in enumerate(self.chunks)}


def embed_chunks(
    chunks: Sequence[Chunk], model: str, device: str, progress: bool, bar: tqdm | None = None
) -> np.ndarray:
    """The chunks' vectors, one float32 row each (what the model computes): a million
    chunks at 384 dimensions take 1.5 GB this way, where lists of Python floats took 12 GB.
    ``bar`` (a caller's progress bar counting chunks) advances as they are embedded. The
    chunks go to the model shortest first, so each call holds texts of similar length."""
    matrix = np.zeros((len(chunks), 0), dtype=np.float32)
    if not chunks:  # no model loaded when no dense index needs a vector
        return matrix
    embeddings = load_embeddings(model, device)
    order = np.argsort([len(c.content) for c in chunks], kind="stable")
    batches = range(0, len(chunks), EMBED_BATCH)
    own = bar is None and progress
    for start in tqdm(batches, desc="embedding", unit="batch", disable=bars_off(own)):
        part = order[start : start + EMBED_BATCH]
        texts = [chunks[i].content for i in part]
        rows = np.asarray(embeddings.embed_documents(texts), np.float32)
        if start == 0:
            matrix = np.empty((len(chunks), rows.shape[1]), dtype=np.float32)
        matrix[part] = rows
        if bar is not None:
            bar.update(len(part))
    return matrix


def embed(
    chunks: Sequence[Chunk], config: PipelineConfig, bar: tqdm | None = None
) -> EmbeddedChunks:
    """The vectors of ``chunks`` under the configuration's embedding model."""
    model, device = config.embeddings.model, config.embeddings.device
    return EmbeddedChunks(list(chunks), embed_chunks(chunks, model, device, False, bar))


def stores_sentence_vectors(config: PipelineConfig) -> bool:
    """Whether the generator reads stored sentence vectors (kind ``extractive`` with a
    ``min_similarity`` and a ``sentence_vectors`` file): otherwise none are embedded here."""
    settings = config.generator
    return (
        settings.kind == "extractive"
        and settings.min_similarity is not None
        and settings.sentence_vectors is not None
    )


def store_sentence_vectors(
    chunks: Sequence[Chunk],
    config: PipelineConfig,
    base_dir: Path,
    progress: bool,
    known: dict[str, np.ndarray] | None = None,
) -> int:
    """Embed the sentences of ``chunks`` the extractive generator will score (split as it
    splits them) into ``generator.sentence_vectors``, skipping those already stored; returns
    how many were embedded. A sentence that is a whole chunk just embedded (``known``: text to
    vector) is stored with that vector, not embedded again. Nothing when the generator reads
    no vectors (``stores_sentence_vectors``). Each batch is its own transaction, so an ingest
    killed halfway keeps what it stored and the next one embeds only the rest."""
    if not stores_sentence_vectors(config):
        return 0
    settings = config.generator
    assert settings.sentence_vectors is not None
    model, device = config.embeddings.model, config.embeddings.device
    store = SentenceVectorStore(base_dir / settings.sentence_vectors, embedding_identity(model))
    try:
        texts = list(dict.fromkeys(s for c in chunks for s in split_sentences(c.content)))
        missing = store.missing(texts)
    finally:
        store.close()
    if not missing:
        return 0
    known = known or {}
    reused = [t for t in missing if t in known]
    if reused:
        store.put(reused, np.asarray([known[t] for t in reused]))
        missing = [t for t in missing if t not in known]
    if not missing:
        return 0
    embeddings = load_embeddings(model, device)
    batches = range(0, len(missing), SENTENCE_BATCH)
    for start in tqdm(batches, desc="sentence vectors", unit="batch", disable=bars_off(progress)):
        batch = missing[start : start + SENTENCE_BATCH]
        store.put(batch, embeddings.embed_documents(batch))
    return len(missing)
