"""``ingest``: read files once, chunk them, and write the same chunks into every configured
store ingest can write (each backend that registers a ``StoreWriter``: BM25, Qdrant, Milvus
and managed vector stores, including those a ``hybrid`` uses), replacing earlier chunks of the
same files. ``store=NAME`` (``parallel-rag ingest --store
NAME``) writes into the managed vector store ``NAME`` only, creating it if needed.

Every file is converted first (its chunks spooled to a temporary file), so a bad file stops
the run before anything is written (or, with ``skip_bad_files``, is listed and left out). Then
every store is opened (a store another process holds fails here, before any write) and the
chunks are embedded and written a batch at a time (``file_batches``: whole files, a file larger
than a batch in parts): memory is bounded by the batch, not the corpus. Each batch is
embedded before it is written, so a missing model fails before the first write that needs a
vector. Chunk ids are stable and each index replaces a
file's chunks as a whole, so an ingest killed halfway converges when run again: the batches
already written are found unchanged and skipped, every chunk ends present exactly once, the
same ids in every index.

Re-ingesting unchanged files changes nothing: every chunk carries a ``chunk_hash`` of its text,
metadata and embedding model; a store that already holds a file's chunks with the same ids and
hashes is not written for that file, and those chunks are not embedded again (a file
half-written by a killed ingest has missing points, so it counts as changed). A file is compared
as a whole (a digest of its chunks' ids and hashes, taken when it is converted), so a file
written in parts is compared before its first part and written whole or not at all.

The extractive generator's sentence vectors are stored too (``generator.sentence_vectors``,
keyed by model and sentence text): only sentences not stored yet are embedded.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from parallel_rag.backends.base import BackendContext, ChunkBatch, Fingerprint, StoreWriter
from parallel_rag.backends.encoders.embeddings import embedding_identity, load_embeddings
from parallel_rag.backends.registry import BACKENDS, leaf_entries, named_store, store_writer
from parallel_rag.backends.sentence_vectors import SentenceVectorStore
from parallel_rag.backends.text_analysis import split_sentences
from parallel_rag.graph.components import backend_context
from parallel_rag.graph.configuration import (
    ENTRY_MODELS,
    ConfigError,
    PipelineConfig,
    RetrieverEntry,
)
from parallel_rag.studio.chunk_spool import (
    ChunkSpool,
    file_batches,
    file_digests,
    fingerprint_digest,
)
from parallel_rag.studio.document_loading import (
    SUPPORTED_SUFFIXES,
    BadFileError,
    Chunk,
    DocumentLoadError,
    chunks_from_documents,
    discover_files,
    load_chunks,
)
from parallel_rag.studio.documents import DEFAULT_MAX_FILE_MB, MissingExtraError
from parallel_rag.studio.documents.ocr import release_engine
from parallel_rag.studio.process_memory import (
    bound_kernel_cache,
    give_back_free_memory,
    map_large_blocks,
)
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from langchain_core.documents import Document

EMBED_BATCH = 512
"""Chunks per call to the model: the encoders sort a call's texts by length, so a large call
pads little (a chunk is short or long; 64 in corpus order padded most to the longest)."""


def bars_off(progress: bool) -> bool | None:
    """tqdm's ``disable`` for ``progress``: None (bars on stderr only when it is a terminal, so
    logs and pipes get no carriage-return noise) or True (``--quiet``)."""
    return None if progress else True


@dataclass
class IngestReport:
    """What an ingest run wrote."""

    files: list[str] = field(default_factory=list)
    chunks: int = 0
    indexes: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # indexes that already held it all
    embedded: int = 0  # chunks embedded (unchanged files are not)
    sentences: int = 0  # sentence vectors embedded and stored (ones already stored are not)
    skipped: list[str] = field(default_factory=list)  # bad files left out (--skip-bad-files)
    fusion: str | None = None  # what the fusion fit at the end did (studio/fusion_fit.py)


def add_chunk_hashes(chunks: Sequence[Chunk], embedding_model: str) -> None:
    """Stamp each chunk with a hash of what its index entries are made of."""
    identity = embedding_identity(embedding_model)
    for chunk in chunks:
        chunk.metadata.pop("chunk_hash", None)
        payload = json.dumps(
            [chunk.content, chunk.metadata, identity], sort_keys=True, ensure_ascii=False
        )
        chunk.metadata["chunk_hash"] = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def by_file(fingerprints: Iterable[Fingerprint]) -> dict[str, set[Fingerprint]]:
    grouped: dict[str, set[Fingerprint]] = defaultdict(set)
    for fingerprint in fingerprints:
        grouped[fingerprint[1]].add(fingerprint)
    return grouped


def changed_files(
    digests: Mapping[str, str], file_ids: Iterable[str], stored: set[Fingerprint] | None
) -> set[str]:
    """The files whose chunks in an index (``stored``) differ from their chunks now (ids or
    hashes: ``digests``, each whole file's ``fingerprint_digest``); all of them when nothing
    stored is usable (``stored`` is None)."""
    if stored is None:
        return set(file_ids)
    held = by_file(stored)
    return {f for f in file_ids if fingerprint_digest(held.get(f, ())) != digests[f]}


def writable_targets(config: PipelineConfig) -> list[RetrieverEntry]:
    """Every store ingest can write (its backend registers a store writer), a hybrid's legs
    included, each once."""
    found = [e for e in leaf_entries(config.retrievers) if BACKENDS[e.backend].store is not None]
    unique: dict[str, RetrieverEntry] = {}
    for entry in found:
        unique.setdefault(f"{entry.backend}:{entry.backend_config.model_dump_json()}", entry)
    return list(unique.values())


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


SENTENCE_BATCH = 512  # sentences embedded and stored per transaction


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
    no vectors (kind ``llm``, ``min_similarity`` or ``sentence_vectors`` null). Each batch is
    its own transaction, so an ingest killed halfway keeps what it stored and the next one
    embeds only the rest."""
    settings = config.generator
    if (
        settings.kind != "extractive"
        or settings.min_similarity is None
        or settings.sentence_vectors is None
    ):
        return 0
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


def writer_for(entry: RetrieverEntry, context: BackendContext) -> StoreWriter:
    writer = store_writer(entry.backend, entry.backend_config, context)  # type: ignore[attr-defined]
    assert writer is not None  # writable_targets keeps only backends with a store writer
    return writer


def ingest_targets(config: PipelineConfig, store: str | None) -> list[RetrieverEntry]:
    """The stores an ingest writes: every writable configured one, or the named store ``store``
    alone (a managed vector store: ``registry.named_store``)."""
    if store is not None:
        backend, settings = named_store(store, config.retrievers)
        entry = {"name": "store", "backend": backend, "backend_config": settings}
        return [ENTRY_MODELS[backend].model_validate(entry)]
    targets = writable_targets(config)
    if not targets:
        raise ConfigError("retrievers: no configured retriever has an index parallel-rag can write")
    return targets


INGEST_BATCH_CHUNKS = 2048
"""Chunks converted, embedded and written per batch (whole files): ingest's memory is bounded
by a batch, not the corpus, and a killed ingest keeps every batch it wrote."""


def ingest_paths(
    paths: Iterable[str | Path],
    config: PipelineConfig,
    base_dir: Path,
    *,
    progress: bool = True,
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    extra_metadata: dict[str, Any] | None = None,
    store: str | None = None,
    skip_bad_files: bool = False,
    max_file_mb: float = DEFAULT_MAX_FILE_MB,
    batch_chunks: int | None = None,
    fit: bool = True,
) -> IngestReport:
    """Ingest files or directories into every index the config names (bm25, qdrant, milvus,
    vectorstore), or only into the managed vector store ``store``.

    Two passes. First every file is converted, its chunks spooled to a temporary file: a bad
    file (corrupt, encrypted, no text, over ``max_file_mb``...) is one line naming it and the
    reason; by default all bad files are listed and nothing is written, ``skip_bad_files``
    goes on with the others and lists the bad ones in ``report.skipped``. A converter's missing
    extra stops the run either way. Then the chunks are embedded and written a batch of whole
    files at a time (``batch_chunks``, default ``INGEST_BATCH_CHUNKS``): memory stays bounded by
    a batch, and an ingest killed after some batches, run again, finds those files unchanged in
    every store and neither embeds nor writes them again. Last, with ``fit``, the fusion is
    fitted to the stores' corpus (``fit_after_ingest``; ``report.fusion`` says what it did)."""
    targets = ingest_targets(config, store)
    files = discover_files(paths)
    if not files:
        raise DocumentLoadError(
            f"no {', '.join(sorted(SUPPORTED_SUFFIXES))} files found in the given paths"
        )
    bad: dict[Path, str] = {}
    with ChunkSpool() as spool:
        reading = tqdm(files, desc="converting", unit="file", disable=bars_off(progress))
        pages = 0  # PDF pages and slides converted
        for path in reading:
            try:
                chunks = load_chunks(
                    path,
                    chunk_size=chunk_size,
                    chunk_overlap=chunk_overlap,
                    extra_metadata=extra_metadata,
                    max_file_mb=max_file_mb,
                )
                add_chunk_hashes(chunks, config.embeddings.model)
                pages += spool.extend(chunks)
            except MissingExtraError:
                raise
            except BadFileError as error:
                bad[path] = str(error)
            counts = {"pages": pages} if pages else {}
            reading.set_postfix(**counts, chunks=spool.count, bad=len(bad), refresh=False)
        reading.close()
        release_engine()  # an OCR engine made for scanned pages is not needed from here on
        if bad and (not skip_bad_files or len(bad) == len(files)):
            reason = "no usable file" if skip_bad_files else "nothing was ingested"
            raise BadFileError(
                f"{len(bad)} bad file(s), {reason} (--skip-bad-files indexes the others):\n  "
                + "\n  ".join(bad.values())
            )
        batches = file_batches(spool, batch_chunks or INGEST_BATCH_CHUNKS)
        report = write_batches(
            batches, spool.count, spool.digests, config, base_dir, targets, store, progress
        )
    report.files = [str(p) for p in files if p not in bad]
    report.skipped = list(bad.values())
    _fit(report, config, base_dir, store, fit)
    return report


def ingest_documents(
    documents: Iterable[Document],
    config: PipelineConfig,
    base_dir: Path,
    *,
    progress: bool = True,
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    extra_metadata: dict[str, Any] | None = None,
    store: str | None = None,
    zero_based_pages: bool = False,
    fit: bool = True,
) -> IngestReport:
    """Ingest LangChain ``Document``s (any loader's output) into every configured store, or
    the managed vector store ``store``, as files are ingested: the Documents of one
    ``metadata["source"]`` are one document whose chunks replace what the stores held for it;
    a source that is a local file gets the file's own id, so ingesting the file or a loader's
    Documents of it replace each other. ``zero_based_pages``: the loader counts pages from 0
    (LangChain's PDF loaders do); citations count from 1. ``fit`` as for ``ingest_paths``."""
    targets = ingest_targets(config, store)
    chunks, sources = chunks_from_documents(
        documents,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        extra_metadata=extra_metadata,
        zero_based_pages=zero_based_pages,
    )
    if not chunks:
        raise DocumentLoadError("no document with text to ingest")
    chunks.sort(key=lambda c: c.metadata["file_id"])  # stable: a source's chunks keep order
    add_chunk_hashes(chunks, config.embeddings.model)
    digests = file_digests(chunks)
    batches = file_batches(chunks, INGEST_BATCH_CHUNKS)
    report = write_batches(
        batches, len(chunks), digests, config, base_dir, targets, store, progress
    )
    report.files = list(sources.values())
    _fit(report, config, base_dir, store, fit)
    return report


def _fit(
    report: IngestReport, config: PipelineConfig, base_dir: Path, store: str | None, fit: bool
) -> None:
    # a managed store written alone (--store) is not what the pipeline's branches read
    if fit and store is None:
        from parallel_rag.studio.fusion_fit import fit_after_ingest

        changed = len(report.unchanged) < len(report.indexes)
        report.fusion = fit_after_ingest(config, base_dir, changed=changed)


def write_batches(
    batches: Iterable[list[Chunk]],
    total: int,
    digests: Mapping[str, str],
    config: PipelineConfig,
    base_dir: Path,
    targets: list[RetrieverEntry],
    store: str | None,
    progress: bool,
) -> IngestReport:
    """Write batches of chunks (``file_batches``, each file's chunks contiguous, ``digests``
    each file's ``fingerprint_digest``) into ``targets``: every store is opened before the
    first write, then each file's chunks replace what a store held for it, skipping the stores
    whose chunks of that file are unchanged (see the module). A file split over several batches
    is compared as a whole before its first part: that part replaces what the store held for
    the file and the later parts are added to it. The encoder's large tensors are mapped on
    their own and freed memory is given back after each stage (``process_memory``), so a
    batch's peak is not carried into the next."""
    map_large_blocks()
    bound_kernel_cache()
    stored = config.generator.sentence_vectors
    context = replace(
        backend_context(base_dir, config.embeddings),
        sentence_vectors=base_dir / stored if stored is not None else None,
    )
    writers = [writer_for(entry, context) for entry in targets]
    for writer in writers:  # a store another process holds fails here, before any write
        writer.open()
    labels = [
        f"vector store {store}" if store is not None else f"{entry.name} ({entry.backend})"
        for entry in targets
    ]
    report = IngestReport(indexes=labels)
    written: set[str] = set()
    bar = tqdm(total=total, desc="indexing", unit="chunk", disable=bars_off(progress))
    going_on: FilePlan | None = None
    for chunks in batches:
        done, going_on = write_batch(
            chunks, digests, going_on, config, base_dir, writers, report, bar
        )
        written |= {label for label, wrote in zip(labels, done, strict=True) if wrote}
    bar.close()
    report.unchanged = [label for label in labels if label not in written]
    return report


class FilePlan(NamedTuple):
    """The last file of a batch and which stores write it: what the next batch follows for
    that file if it goes on there."""

    file_id: str
    writes: tuple[bool, ...]


def write_batch(
    chunks: list[Chunk],
    digests: Mapping[str, str],
    going_on: FilePlan | None,
    config: PipelineConfig,
    base_dir: Path,
    writers: list[StoreWriter],
    report: IngestReport,
    bar: tqdm,
) -> tuple[list[bool], FilePlan]:
    """One batch into every store: which stores it wrote, and the plan for its last file.
    ``going_on`` is the previous batch's last file: when this batch starts with more of it,
    those chunks go to the stores that wrote its first part, added to it."""
    files = list(dict.fromkeys(c.metadata["file_id"] for c in chunks))
    carried = going_on if going_on is not None and going_on.file_id == files[0] else None
    starting = files[1:] if carried is not None else files
    to_write = [
        changed_files(digests, starting, writer.fingerprints(starting)) if starting else set()
        for writer in writers
    ]
    if carried is not None:
        for files_to_write, writes in zip(to_write, carried.writes, strict=True):
            if writes:
                files_to_write.add(carried.file_id)
    dense = [files for w, files in zip(writers, to_write, strict=True) if w.needs_vectors]
    needed = set().union(*dense)
    to_embed = [c for c in chunks if c.metadata["file_id"] in needed]
    bar.update(len(chunks) - len(to_embed))  # unchanged chunks count as done at once
    model, device = config.embeddings.model, config.embeddings.device
    bar.set_postfix_str(f"embedding chunks; {report.sentences} sentence vectors so far")
    vectors = embed_chunks(to_embed, model, device, progress=False, bar=bar)
    give_back_free_memory()
    row_of = {c.id: row for row, c in enumerate(to_embed)}
    report.chunks += len(chunks)
    report.embedded += len(to_embed)
    known = {c.content: vectors[row] for row, c in enumerate(to_embed)}
    bar.set_postfix_str(f"embedding sentences; {report.sentences} so far")
    report.sentences += store_sentence_vectors(chunks, config, base_dir, False, known)
    give_back_free_memory()
    bar.set_postfix_str(f"writing {len(writers)} index(es); {report.sentences} sentence vectors")
    for writer, files_to_write in zip(writers, to_write, strict=True):
        if not files_to_write:
            continue
        kept = [c for c in chunks if c.metadata["file_id"] in files_to_write]
        batch = ChunkBatch(
            ids=[c.id for c in kept],
            texts=[c.content for c in kept],
            metadatas=[c.metadata for c in kept],
            vectors=vectors[[row_of[c.id] for c in kept]] if writer.needs_vectors else None,
        )
        # the first part of a file replaces what the store held of it; the later ones add
        added = {carried.file_id} if carried is not None else set()
        writer.write(batch, sorted(files_to_write - added))
    give_back_free_memory()
    last = FilePlan(files[-1], tuple(files[-1] in files_to_write for files_to_write in to_write))
    return [bool(files_to_write) for files_to_write in to_write], last
