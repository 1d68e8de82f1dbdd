"""Reading user files into chunks: Markdown, text, JSONL, CSV, PDF, HTML, DOCX and PPTX.

The converters (``studio/documents/``) turn a file into records of segments (a page, a slide,
a body); this module cuts each segment into chunks, never across two, and stamps them with
``source``, ``file_id``, ``title``, ``chunk_index`` and the structure metadata: ``page`` (PDF,
1-based), ``slide`` (PPTX), ``section`` (the heading path, for Markdown, HTML and DOCX; a
slide's title). Chunks get stable ids (UUIDv5 of file id, record id and chunk number) so every
index agrees on them and re-ingesting a file replaces its chunks instead of duplicating them.
Files are decoded strictly: invalid UTF-8 is an error naming the file, raised before anything
is written.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_text_splitters import Language, RecursiveCharacterTextSplitter
from parallel_rag.studio.documents import (
    DEFAULT_MAX_FILE_MB,
    SUPPORTED_SUFFIXES,
    BadFileError,
    DocumentLoadError,
    Record,
    Segment,
    convert_file,
)
from parallel_rag.studio.documents.markdown import SectionIndex

if TYPE_CHECKING:
    from langchain_core.documents import Document

CHUNK_NAMESPACE = uuid.UUID("6f1d9a52-3c1e-4d7e-9b8a-5d2f0c7e4a11")
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 150

__all__ = [
    "SUPPORTED_SUFFIXES",
    "BadFileError",
    "Chunk",
    "DocumentLoadError",
    "chunk_records",
    "chunks_from_documents",
    "discover_files",
    "file_id_for",
    "load_chunks",
]


@dataclass
class Chunk:
    """One indexed unit: stable id, text, flat metadata."""

    id: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


def file_id_for(path: Path) -> str:
    """Stable id of a file: re-ingesting the same file (from any cwd) replaces its chunks."""
    return "file-" + hashlib.sha1(str(path.resolve()).encode("utf-8")).hexdigest()[:16]


def chunk_id_for(file_id: str, record_id: str, number: int) -> str:
    return str(uuid.uuid5(CHUNK_NAMESPACE, f"{file_id}\x1f{record_id}\x1f{number}"))


def _supported(path: Path) -> bool:
    return path.suffix.lower() in SUPPORTED_SUFFIXES


def discover_files(paths: Iterable[str | Path]) -> list[Path]:
    """Supported files under the given files/directories, sorted; unknown paths are errors."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(p for p in sorted(path.rglob("*")) if p.is_file() and _supported(p))
        elif path.is_file():
            if not _supported(path):
                raise DocumentLoadError(
                    f"{path}: unsupported file type '{path.suffix}' "
                    f"(supported: {', '.join(sorted(SUPPORTED_SUFFIXES))})"
                )
            found.append(path)
        else:
            raise DocumentLoadError(f"{path}: no such file or directory")
    return list(dict.fromkeys(found))


def display_source(path: Path) -> str:
    """How citations name a file: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def _splitter(
    markdown: bool, chunk_size: int, chunk_overlap: int
) -> RecursiveCharacterTextSplitter:
    if markdown:
        return RecursiveCharacterTextSplitter.from_language(
            Language.MARKDOWN,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            add_start_index=True,
        )
    return RecursiveCharacterTextSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, add_start_index=True
    )


def _flat(metadata: dict[str, Any]) -> dict[str, Any]:
    """Only scalar metadata is kept, so every backend can filter on it."""
    return {str(k): v for k, v in metadata.items() if isinstance(v, str | int | float | bool)}


def _pieces(segment: Segment, chunk_size: int, chunk_overlap: int) -> list[tuple[str, str]]:
    """(text, section) of each chunk of one segment; the section is the heading path in force
    where the chunk starts (Markdown only)."""
    splitter = _splitter(segment.markdown, chunk_size, chunk_overlap)
    sections = SectionIndex(segment.text) if segment.markdown else None
    pieces = []
    for document in splitter.create_documents([segment.text]):
        if not document.page_content.strip():
            continue
        start = document.metadata.get("start_index", -1)
        section = sections.at(max(start, 0)) if sections is not None else ""
        pieces.append((document.page_content, section))
    return pieces


def chunk_records(
    records: Iterable[Record],
    *,
    file_id: str,
    source: str,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    extra_metadata: dict[str, Any] | None = None,
) -> list[Chunk]:
    """The chunks of one file's (or one LangChain source's) records: numbered per record
    across its segments, so ids are stable and no chunk crosses a page or slide."""
    chunks: list[Chunk] = []
    for record in records:
        number = 0
        for segment in record.segments:
            for piece, section in _pieces(segment, chunk_size, chunk_overlap):
                content = f"{record.title}\n{piece}" if record.record_id and record.title else piece
                metadata = {
                    **_flat(record.metadata),
                    **(extra_metadata or {}),
                    "source": source + (f"#{record.record_id}" if record.record_id else ""),
                    "file_id": file_id,
                    "title": record.title,
                    "chunk_index": number,
                    **_flat(segment.metadata),
                }
                if section:
                    metadata["section"] = section
                if record.record_id:
                    metadata["record_id"] = record.record_id
                chunks.append(
                    Chunk(chunk_id_for(file_id, record.record_id, number), content, metadata)
                )
                number += 1
    return chunks


def load_chunks(
    path: Path,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    extra_metadata: dict[str, Any] | None = None,
    max_file_mb: float = DEFAULT_MAX_FILE_MB,
) -> list[Chunk]:
    """All chunks of one file, with ``source``, ``file_id``, ``title``, position and structure
    metadata; a file that cannot be used raises ``BadFileError`` naming it and the reason."""
    return chunk_records(
        convert_file(path, max_file_mb=max_file_mb),
        file_id=file_id_for(path),
        source=display_source(path),
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        extra_metadata=extra_metadata,
    )


# what chunk_records sets itself: a Document's own value would contradict the chunk's identity
_OWN_FIELDS = {"source", "file_id", "title", "chunk_index", "chunk_hash", "record_id"}


def _document_source(metadata: dict[str, Any], number: int) -> tuple[str, str]:
    """(file id, source) of a LangChain Document: a local file's are what ingesting the file
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
        return file_id_for(path), display_source(path)
    return "doc-" + hashlib.sha1(str(source).encode("utf-8")).hexdigest()[:16], str(source)


def chunks_from_documents(
    documents: Iterable[Document],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    extra_metadata: dict[str, Any] | None = None,
    zero_based_pages: bool = False,
) -> tuple[list[Chunk], dict[str, str]]:
    """Chunks of LangChain Documents, and {file id: source}: the Documents of one ``source``
    (a loader's pages of one file) are one document, each Document a segment no chunk crosses,
    its scalar metadata kept. ``zero_based_pages`` adds 1 to ``page`` (LangChain's PDF loaders
    count from 0; citations count from 1)."""
    grouped: dict[str, tuple[str, Record]] = {}
    for number, document in enumerate(documents, start=1):
        metadata = dict(document.metadata or {})
        file_id, source = _document_source(metadata, number)
        if zero_based_pages and isinstance(metadata.get("page"), int):
            metadata["page"] += 1
        if file_id not in grouped:
            title = str(metadata.get("title") or Path(source).stem or source)
            grouped[file_id] = (source, Record("", title, []))
        if document.page_content.strip():
            kept = {k: v for k, v in metadata.items() if k not in _OWN_FIELDS}
            grouped[file_id][1].segments.append(Segment(document.page_content, kept))
    chunks: list[Chunk] = []
    for file_id, (source, record) in grouped.items():
        chunks.extend(
            chunk_records(
                [record],
                file_id=file_id,
                source=source,
                chunk_size=chunk_size,
                chunk_overlap=chunk_overlap,
                extra_metadata=extra_metadata,
            )
        )
    return chunks, {file_id: source for file_id, (source, _) in grouped.items()}
