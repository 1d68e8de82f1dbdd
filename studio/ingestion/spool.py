"""Converted chunks on disk between ingest's two passes (convert and chunk every file, then
embed and write), read back a batch at a time.

Ingest converts every file first (so a bad file stops the run before anything is written) and
writes the stores second; keeping the chunks in a temporary JSON-lines file in between bounds
memory by one batch instead of the corpus, and converts each file once. The spool also keeps a
digest of each file's chunks, so that a file written over several batches is compared with a
store's copy as a whole before its first part is written.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType

from parallel_rag.backends.base import Fingerprint
from parallel_rag.studio.ingestion.chunk import Chunk


def file_batches(chunks: Iterable[Chunk], batch_chunks: int) -> Iterator[list[Chunk]]:
    """Chunks in batches of about ``batch_chunks``: a batch closes at the first file boundary
    past ``batch_chunks`` chunks, or inside a file once it holds ``batch_chunks`` chunks of
    that file, so a file larger than a batch (one big JSON-lines or CSV file) is written in
    parts and no batch holds more than twice ``batch_chunks``. A file's chunks must be
    contiguous."""
    batch: list[Chunk] = []
    of_file = 0  # chunks of the batch's last file in the batch
    for chunk in chunks:
        new_file = not batch or batch[-1].metadata["file_id"] != chunk.metadata["file_id"]
        if len(batch) >= batch_chunks and (new_file or of_file >= batch_chunks):
            yield batch
            batch, of_file = [], 0
        of_file = 1 if new_file else of_file + 1
        batch.append(chunk)
    if batch:
        yield batch


def fingerprint_digest(fingerprints: Iterable[Fingerprint]) -> str:
    """One file's chunks as ingest compares them with a store's: a digest of their (id,
    ``chunk_hash``) pairs, in no particular order and each once (a store answers with a set).
    Equal digests: the store holds the file's chunks exactly, none missing, none extra."""
    pairs = sorted({f"{chunk_id}\x1f{chunk_hash}" for chunk_id, _, chunk_hash in fingerprints})
    return hashlib.sha256("\x1e".join(pairs).encode("utf-8")).hexdigest()


def file_digests(chunks: Iterable[Chunk]) -> dict[str, str]:
    """``fingerprint_digest`` of each file's chunks (they carry ``chunk_hash``)."""
    grouped: dict[str, list[Fingerprint]] = defaultdict(list)
    for chunk in chunks:
        file_id = chunk.metadata["file_id"]
        grouped[file_id].append((chunk.id, file_id, chunk.metadata.get("chunk_hash")))
    return {file_id: fingerprint_digest(group) for file_id, group in grouped.items()}


class ChunkSpool:
    """An append-only temporary file of chunks, gone on close. The file is unlinked when it is
    made (``tempfile.TemporaryFile``): even an ingest killed by a signal leaves no spool behind
    (a 100k-document run's is about 200 MB)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(  # noqa: SIM115 (closed in close())
            "w+", encoding="utf-8", prefix="parallel-rag-ingest-", suffix=".jsonl"
        )
        self.count = 0
        self.digests: dict[str, str] = {}

    def extend(self, chunks: Sequence[Chunk]) -> int:
        """Append the chunks of whole files (each file's in one call, with ``chunk_hash``; their
        ``file_digests`` are kept in ``digests``); returns how many distinct pages and slides
        they come from (for the progress bar: 0 for files without pages)."""
        digests = file_digests(chunks)
        again = digests.keys() & self.digests.keys()
        if again:
            raise ValueError(f"chunks of {sorted(again)[0]} spooled in two calls")
        self.digests.update(digests)
        self._file.seek(0, 2)  # after everything written, wherever a read stopped
        pages = set()
        for chunk in chunks:
            record = [chunk.id, chunk.content, chunk.metadata]
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.count += 1
            for key in ("page", "slide"):
                if key in chunk.metadata:
                    pages.add((chunk.metadata.get("file_id"), key, chunk.metadata[key]))
        return len(pages)

    def __iter__(self) -> Iterator[Chunk]:
        """The chunks in the order written (the spool is read from its start; appending while
        a read is under way is refused)."""
        self._file.flush()
        self._file.seek(0)
        end = self.count
        for read, line in enumerate(self._file, start=1):
            chunk_id, content, metadata = json.loads(line)
            yield Chunk(chunk_id, content, metadata)
            if self.count != end:
                raise RuntimeError("chunks were spooled while the spool was being read")
            if read == end:
                break

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ChunkSpool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
