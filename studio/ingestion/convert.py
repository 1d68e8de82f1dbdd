"""Stage 2, convert: a file (or a loader's LangChain ``Document``s of one source) becomes
records of segments, text with structure (a page, a slide, a body with its headings), by the
converters in ``studio/documents/``; no chunk is cut yet.

Converting is its own stage so that every file is converted before anything is written (a bad
file stops the run, or is listed and left out, while every store is intact) and so that its
time is seen apart from the encoder's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallel_rag.studio.documents import (
    DEFAULT_MAX_FILE_MB,
    DocumentLoadError,
    Record,
    Segment,
    convert_file,
)
from parallel_rag.studio.ingestion.load import SourceFile, display_source, file_id_for

if TYPE_CHECKING:
    from langchain_core.documents import Document


@dataclass
class ConvertedFile:
    """One document's records (a JSON-lines file has one per line; other formats one)."""

    file: SourceFile
    records: list[Record]


def convert(file: SourceFile, max_file_mb: float = DEFAULT_MAX_FILE_MB) -> ConvertedFile:
    """The records of one file; a file that cannot be used raises ``BadFileError`` naming it
    and the reason (a converter's missing extra raises ``MissingExtraError``)."""
    assert file.path is not None  # files from load() always have one
    return ConvertedFile(file, list(convert_file(file.path, max_file_mb=max_file_mb)))


# what chunking sets itself: a Document's own value would contradict the chunk's identity
OWN_FIELDS = {"source", "file_id", "title", "chunk_index", "chunk_hash", "record_id"}


def document_source(metadata: dict[str, Any], number: int) -> SourceFile:
    """The ``SourceFile`` of a LangChain Document: a local file's is what ingesting the file
    gives (so either way replaces the other), any other source's (a URL, a page id) a hash of
    it."""
    source = metadata.get("source")
    if source is None or not str(source).strip():
        raise DocumentLoadError(
            f"document {number}: metadata 'source' is missing; ingest needs it to give the "
            "document's chunks stable ids"
        )
    path = Path(str(source))
    if path.is_file():
        return SourceFile(path, file_id_for(path), display_source(path))
    file_id = "doc-" + hashlib.sha1(str(source).encode("utf-8")).hexdigest()[:16]
    return SourceFile(None, file_id, str(source))


def convert_documents(
    documents: Iterable[Document], *, zero_based_pages: bool = False
) -> list[ConvertedFile]:
    """LangChain Documents as converted files: the Documents of one ``source`` (a loader's
    pages of one file) are one document, each Document a segment no chunk crosses, its scalar
    metadata kept. ``zero_based_pages`` adds 1 to ``page`` (LangChain's PDF loaders count from
    0; citations count from 1). A source without text is kept (it has no chunks)."""
    grouped: dict[str, ConvertedFile] = {}
    for number, document in enumerate(documents, start=1):
        metadata = dict(document.metadata or {})
        file = document_source(metadata, number)
        if zero_based_pages and isinstance(metadata.get("page"), int):
            metadata["page"] += 1
        if file.file_id not in grouped:
            title = str(metadata.get("title") or Path(file.source).stem or file.source)
            grouped[file.file_id] = ConvertedFile(file, [Record("", title, [])])
        if document.page_content.strip():
            kept = {k: v for k, v in metadata.items() if k not in OWN_FIELDS}
            grouped[file.file_id].records[0].segments.append(Segment(document.page_content, kept))
    return list(grouped.values())
