"""Stage 3, chunk: a converted file's records become chunks, each segment (a page, a slide, a
body) cut on its own so no chunk crosses two, stamped with ``source``, ``file_id``, ``title``,
``chunk_index`` and the structure metadata: ``page`` (PDF, 1-based), ``slide`` (PPTX),
``section`` (the heading path, for Markdown, HTML and DOCX; a slide's title).

Chunks get stable ids (UUIDv5 of file id, record id and chunk number) so every index agrees on
them and re-ingesting a file replaces its chunks instead of duplicating them; and a
``chunk_hash`` of what their index entries are made of (text, metadata, embedding model), so a
store already holding a file's chunks unchanged is not written again. Sizes come from
``defaults`` (one place).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_text_splitters import Language, RecursiveCharacterTextSplitter
from parallel_rag.backends.encoders.embeddings import embedding_identity
from parallel_rag.studio.documents import DEFAULT_MAX_FILE_MB, Record, Segment
from parallel_rag.studio.documents.markdown import SectionIndex
from parallel_rag.studio.ingestion.convert import ConvertedFile, convert, convert_documents
from parallel_rag.studio.ingestion.defaults import CHUNK_OVERLAP, CHUNK_SIZE
from parallel_rag.studio.ingestion.load import source_file

if TYPE_CHECKING:
    from langchain_core.documents import Document

CHUNK_NAMESPACE = uuid.UUID("6f1d9a52-3c1e-4d7e-9b8a-5d2f0c7e4a11")


@dataclass
class Chunk:
    """One indexed unit: stable id, text, flat metadata."""

    id: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkSettings:
    """How chunks are cut (characters; ``defaults``) and what every chunk carries besides its
    own metadata (``--metadata KEY=VALUE``)."""

    size: int = CHUNK_SIZE
    overlap: int = CHUNK_OVERLAP
    extra_metadata: dict[str, Any] | None = None


def chunk_id_for(file_id: str, record_id: str, number: int) -> str:
    return str(uuid.uuid5(CHUNK_NAMESPACE, f"{file_id}\x1f{record_id}\x1f{number}"))


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
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
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


def add_chunk_hashes(chunks: Sequence[Chunk], embedding_model: str) -> None:
    """Stamp each chunk with a hash of what its index entries are made of."""
    identity = embedding_identity(embedding_model)
    for chunk in chunks:
        chunk.metadata.pop("chunk_hash", None)
        payload = json.dumps(
            [chunk.content, chunk.metadata, identity], sort_keys=True, ensure_ascii=False
        )
        chunk.metadata["chunk_hash"] = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def chunk(
    converted: ConvertedFile, settings: ChunkSettings, embedding_model: str | None = None
) -> list[Chunk]:
    """The chunks of one converted file, hashed for ``embedding_model`` when given (ingest
    compares stores by these hashes)."""
    chunks = chunk_records(
        converted.records,
        file_id=converted.file.file_id,
        source=converted.file.source,
        chunk_size=settings.size,
        chunk_overlap=settings.overlap,
        extra_metadata=settings.extra_metadata,
    )
    if embedding_model is not None:
        add_chunk_hashes(chunks, embedding_model)
    return chunks


def load_chunks(
    path: Path,
    *,
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
    extra_metadata: dict[str, Any] | None = None,
    max_file_mb: float = DEFAULT_MAX_FILE_MB,
) -> list[Chunk]:
    """All chunks of one file (load, convert and chunk in one call), with ``source``,
    ``file_id``, ``title``, position and structure metadata; a file that cannot be used raises
    ``BadFileError`` naming it and the reason."""
    converted = convert(source_file(path), max_file_mb)
    return chunk(converted, ChunkSettings(chunk_size, chunk_overlap, extra_metadata))


def chunks_from_documents(
    documents: Iterable[Document],
    *,
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
    extra_metadata: dict[str, Any] | None = None,
    zero_based_pages: bool = False,
) -> tuple[list[Chunk], dict[str, str]]:
    """Chunks of LangChain Documents (``convert.convert_documents``), and {file id: source}."""
    converted = convert_documents(documents, zero_based_pages=zero_based_pages)
    settings = ChunkSettings(chunk_size, chunk_overlap, extra_metadata)
    chunks = [c for file in converted for c in chunk(file, settings)]
    return chunks, {file.file.file_id: file.file.source for file in converted}
