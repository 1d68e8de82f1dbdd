"""The ingest pipeline: load -> convert -> chunk (every file, spooled) -> embed -> write, a
batch at a time, with a progress bar per pass and each stage's wall and CPU time in
``IngestReport.timings``; then, unless told not to, the fusion is fitted to the corpus.

Every file is converted and chunked first (its chunks spooled to a temporary file), so a bad
file stops the run before anything is written (or, with ``skip_bad_files``, is listed and left
out). Then every store is opened (a store another process holds fails here, before any write)
and the chunks are embedded and written a batch at a time (``spool.file_batches``: whole files,
a file larger than a batch in parts): memory is bounded by the batch, not the corpus. Each
batch is embedded before it is written, so a missing model fails before the first write that
needs a vector. Chunk ids are stable and each store replaces a file's chunks as a whole, so an
ingest killed halfway converges when run again: the batches already written are found
unchanged and skipped, every chunk ends present exactly once, the same ids in every store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.graph.configuration import PipelineConfig, RetrieverEntry
from parallel_rag.studio.documents import DEFAULT_MAX_FILE_MB, BadFileError, MissingExtraError
from parallel_rag.studio.documents.base import DocumentLoadError
from parallel_rag.studio.documents.ocr import release_engine
from parallel_rag.studio.ingestion.chunk import Chunk, ChunkSettings, add_chunk_hashes, chunk
from parallel_rag.studio.ingestion.convert import convert, convert_documents
from parallel_rag.studio.ingestion.defaults import CHUNK_OVERLAP, CHUNK_SIZE, INGEST_BATCH_CHUNKS
from parallel_rag.studio.ingestion.embed import bars_off, embed, store_sentence_vectors
from parallel_rag.studio.ingestion.load import load
from parallel_rag.studio.ingestion.spool import ChunkSpool, file_batches, file_digests
from parallel_rag.studio.ingestion.timings import StageTimings
from parallel_rag.studio.ingestion.write import (
    FilePlan,
    Target,
    ingest_context,
    ingest_targets,
    open_targets,
    plan_batch,
    write_target,
)
from parallel_rag.studio.process_memory import (
    bound_kernel_cache,
    give_back_free_memory,
    map_large_blocks,
)
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from langchain_core.documents import Document


@dataclass
class IngestReport:
    """What an ingest run wrote, and where its time went."""

    files: list[str] = field(default_factory=list)
    chunks: int = 0
    indexes: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # indexes that already held it all
    embedded: int = 0  # chunks embedded (unchanged files are not)
    sentences: int = 0  # sentence vectors embedded and stored (ones already stored are not)
    skipped: list[str] = field(default_factory=list)  # bad files left out (--skip-bad-files)
    fusion: str | None = None  # what the fusion fit at the end did (studio/fusion_fit.py)
    timings: StageTimings = field(default_factory=StageTimings)

    def as_dict(self) -> dict[str, Any]:
        """The report as ``parallel-rag ingest --json`` prints it (``timings``: each stage's
        ``wall_s``, ``cpu_s`` and ``items``, then ``other`` and ``total``)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {**fields, "timings": self.timings.as_dict()}


def ingest_paths(
    paths: Iterable[str | Path],
    config: PipelineConfig,
    base_dir: Path,
    *,
    progress: bool = True,
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
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
    timings = StageTimings()
    with timings.run():
        entries = ingest_targets(config, store)
        with timings.stage("load") as loading:
            files = load(paths)
            loading.items = len(files)
        settings = ChunkSettings(chunk_size, chunk_overlap, extra_metadata)
        bad: dict[Path, str] = {}
        with ChunkSpool() as spool:
            reading = tqdm(files, desc="converting", unit="file", disable=bars_off(progress))
            pages = 0  # PDF pages and slides converted
            for file in reading:
                assert file.path is not None
                try:
                    with timings.stage("convert", items=1):
                        converted = convert(file, max_file_mb)
                    with timings.stage("chunk") as chunking:
                        chunks = chunk(converted, settings, config.embeddings.model)
                        pages += spool.extend(chunks)
                        chunking.items += len(chunks)
                except MissingExtraError:
                    raise
                except BadFileError as error:
                    bad[file.path] = str(error)
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
                batches,
                spool.count,
                spool.digests,
                config,
                base_dir,
                entries,
                store,
                progress,
                timings,
            )
        report.files = [str(f.path) for f in files if f.path not in bad]
        report.skipped = list(bad.values())
        _fit(report, config, base_dir, store, fit)
    return report


def ingest_documents(
    documents: Iterable[Document],
    config: PipelineConfig,
    base_dir: Path,
    *,
    progress: bool = True,
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
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
    timings = StageTimings()
    with timings.run():
        entries = ingest_targets(config, store)
        with timings.stage("convert") as converting:
            converted = convert_documents(documents, zero_based_pages=zero_based_pages)
            converting.items = len(converted)
        settings = ChunkSettings(chunk_size, chunk_overlap, extra_metadata)
        with timings.stage("chunk") as chunking:
            chunks = [c for file in converted for c in chunk(file, settings)]
            chunking.items = len(chunks)
            if not chunks:
                raise DocumentLoadError("no document with text to ingest")
            chunks.sort(key=lambda c: c.metadata["file_id"])  # stable: a source's chunks in order
            add_chunk_hashes(chunks, config.embeddings.model)
            digests = file_digests(chunks)
        batches = file_batches(chunks, INGEST_BATCH_CHUNKS)
        report = write_batches(
            batches, len(chunks), digests, config, base_dir, entries, store, progress, timings
        )
        report.files = [file.file.source for file in converted]
        _fit(report, config, base_dir, store, fit)
    return report


def _fit(
    report: IngestReport, config: PipelineConfig, base_dir: Path, store: str | None, fit: bool
) -> None:
    # a managed store written alone (--store) is not what the pipeline's branches read
    if fit and store is None:
        from parallel_rag.studio.fusion_fit import fit_after_ingest

        changed = len(report.unchanged) < len(report.indexes)
        with report.timings.stage("fusion fit"):
            report.fusion = fit_after_ingest(config, base_dir, changed=changed)


def write_batches(
    batches: Iterable[list[Chunk]],
    total: int,
    digests: Mapping[str, str],
    config: PipelineConfig,
    base_dir: Path,
    entries: list[RetrieverEntry],
    store: str | None,
    progress: bool,
    timings: StageTimings | None = None,
) -> IngestReport:
    """Embed and write batches of chunks (``file_batches``, each file's chunks contiguous,
    ``digests`` each file's ``fingerprint_digest``) into the stores of ``entries``: every
    store is opened before the first write, then each file's chunks replace what a store held
    for it, skipping the stores whose chunks of that file are unchanged (``write``). The
    encoder's large tensors are mapped on their own and freed memory is given back after each
    stage (``process_memory``), so a batch's peak is not carried into the next."""
    timings = timings if timings is not None else StageTimings()
    map_large_blocks()
    bound_kernel_cache()
    with timings.stage("open stores"):
        targets = open_targets(entries, ingest_context(config, base_dir), store)
    report = IngestReport(indexes=[t.label for t in targets], timings=timings)
    written: set[str] = set()
    bar = tqdm(total=total, desc="indexing", unit="chunk", disable=bars_off(progress))
    going_on: FilePlan | None = None
    for chunks in batches:
        done, going_on = write_batch(
            chunks, digests, going_on, config, base_dir, targets, report, bar
        )
        written |= {t.label for t, wrote in zip(targets, done, strict=True) if wrote}
    bar.close()
    report.unchanged = [t.label for t in targets if t.label not in written]
    return report


def write_batch(
    chunks: list[Chunk],
    digests: Mapping[str, str],
    going_on: FilePlan | None,
    config: PipelineConfig,
    base_dir: Path,
    targets: list[Target],
    report: IngestReport,
    bar: tqdm,
) -> tuple[list[bool], FilePlan]:
    """One batch through embed and write: which stores it wrote, and the plan for its last
    file (``write.plan_batch``)."""
    timings = report.timings
    with timings.stage("compare with stores"):
        plan = plan_batch(chunks, digests, going_on, targets)
    bar.update(len(chunks) - len(plan.to_embed))  # unchanged chunks count as done at once
    bar.set_postfix_str(f"embedding chunks; {report.sentences} sentence vectors so far")
    if plan.to_embed:  # loaded once a process (cached): its time apart from the vectors'
        with timings.stage("load encoder"):
            load_embeddings(config.embeddings.model, config.embeddings.device)
    with timings.stage("chunk vectors", items=len(plan.to_embed)):
        vectors = embed(plan.to_embed, config, bar)
        give_back_free_memory()
    report.chunks += len(chunks)
    report.embedded += len(plan.to_embed)
    bar.set_postfix_str(f"embedding sentences; {report.sentences} so far")
    with timings.stage("sentence vectors") as sentences:
        count = store_sentence_vectors(chunks, config, base_dir, False, vectors.by_text())
        give_back_free_memory()
        sentences.items += count
    report.sentences += count
    bar.set_postfix_str(f"writing {len(targets)} index(es); {report.sentences} sentence vectors")
    for target, files_to_write in zip(targets, plan.to_write, strict=True):
        if files_to_write:
            with timings.stage(f"write {target.label}", items=len(files_to_write)):
                write_target(target, plan, files_to_write, vectors)
    give_back_free_memory()
    return [bool(files) for files in plan.to_write], plan.last()
