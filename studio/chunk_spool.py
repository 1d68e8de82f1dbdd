"""Converted chunks on disk between ingest's two passes, read back a batch at a time.

Ingest converts every file first (so a bad file stops the run before anything is written) and
writes the stores second; keeping the chunks in a temporary JSON-lines file in between bounds
memory by one batch instead of the corpus, and converts each file once.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from parallel_rag.studio.document_loading import Chunk


def file_batches(chunks: Iterable[Chunk], batch_chunks: int) -> Iterator[list[Chunk]]:
    """Chunks in batches of whole files (a store replaces a file's chunks in one write), each
    closed at the first file boundary after ``batch_chunks`` chunks."""
    batch: list[Chunk] = []
    for chunk in chunks:
        if (
            len(batch) >= batch_chunks
            and batch[-1].metadata["file_id"] != chunk.metadata["file_id"]
        ):
            yield batch
            batch = []
        batch.append(chunk)
    if batch:
        yield batch


class ChunkSpool:
    """An append-only temporary file of chunks, deleted on close."""

    def __init__(self) -> None:
        self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
            "w+", encoding="utf-8", prefix="parallel-rag-ingest-", suffix=".jsonl"
        )
        self.count = 0

    @property
    def path(self) -> Path:
        return Path(self._file.name)

    def extend(self, chunks: Iterable[Chunk]) -> int:
        """Append ``chunks``; returns how many distinct pages and slides they come from (for
        the progress bar: 0 for files without pages)."""
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
        self._file.flush()
        with self.path.open(encoding="utf-8") as reader:
            for line in reader:
                chunk_id, content, metadata = json.loads(line)
                yield Chunk(chunk_id, content, metadata)

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
