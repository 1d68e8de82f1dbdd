"""Reading user files into chunks: markdown, plain text and JSONL documents.

Chunks get stable ids (UUIDv5 of file id, record id and chunk number) so every index agrees on
them and re-ingesting a file replaces its chunks instead of duplicating them. Files are decoded
strictly: invalid UTF-8 is an error naming the file, raised before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_text_splitters import (
    Language,
    RecursiveCharacterTextSplitter,
)

SUPPORTED_SUFFIXES = {".md", ".markdown", ".txt", ".jsonl"}
CHUNK_NAMESPACE = uuid.UUID("6f1d9a52-3c1e-4d7e-9b8a-5d2f0c7e4a11")
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 150


class DocumentLoadError(ValueError):
    """A file could not be read as a document; the message names the file (and line)."""


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


def discover_files(paths: Iterable[str | Path]) -> list[Path]:
    """Supported files under the given files/directories, sorted; unknown paths are errors."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(
                p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in SUPPORTED_SUFFIXES
            )
        elif path.is_file():
            if path.suffix not in SUPPORTED_SUFFIXES:
                raise DocumentLoadError(
                    f"{path}: unsupported file type '{path.suffix}' "
                    f"(supported: {', '.join(sorted(SUPPORTED_SUFFIXES))})"
                )
            found.append(path)
        else:
            raise DocumentLoadError(f"{path}: no such file or directory")
    return list(dict.fromkeys(found))


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise DocumentLoadError(
            f"{path}: not valid UTF-8 (byte {error.start}); nothing was ingested"
        ) from None


def _display_source(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def _splitter(suffix: str, chunk_size: int, chunk_overlap: int) -> RecursiveCharacterTextSplitter:
    if suffix in {".md", ".markdown"}:
        return RecursiveCharacterTextSplitter.from_language(
            Language.MARKDOWN, chunk_size=chunk_size, chunk_overlap=chunk_overlap
        )
    return RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)


def _jsonl_records(path: Path, text: str) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DocumentLoadError(f"{path}:{line_number}: not valid JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise DocumentLoadError(f"{path}:{line_number}: each line must be a JSON object")
        body = record.get("text", record.get("content"))
        if not isinstance(body, str) or not body.strip():
            raise DocumentLoadError(f"{path}:{line_number}: field 'text' (or 'content') is missing")
        record_id = str(record.get("id", record.get("_id", line_number)))
        title = str(record.get("title") or "")
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DocumentLoadError(f"{path}:{line_number}: field 'metadata' must be an object")
        yield record_id, title, body, metadata


def _flat(metadata: dict[str, Any]) -> dict[str, Any]:
    """Only scalar metadata is kept, so every backend can filter on it."""
    return {str(k): v for k, v in metadata.items() if isinstance(v, str | int | float | bool)}


def load_chunks(
    path: Path,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    extra_metadata: dict[str, Any] | None = None,
) -> list[Chunk]:
    """All chunks of one file, with ``source``, ``file_id``, ``title`` and position metadata."""
    text = _read_text(path)
    file_id = file_id_for(path)
    source = _display_source(path)
    splitter = _splitter(path.suffix, chunk_size, chunk_overlap)
    if path.suffix == ".jsonl":
        records = list(_jsonl_records(path, text))
    else:
        first = next((line for line in text.splitlines() if line.strip()), "")
        title = first.lstrip("#").strip() if first.startswith("#") else path.stem
        records = [("", title, text, {})]
    chunks: list[Chunk] = []
    for record_id, title, body, record_metadata in records:
        pieces = [p for p in splitter.split_text(body) if p.strip()]
        for number, piece in enumerate(pieces):
            content = f"{title}\n{piece}" if path.suffix == ".jsonl" and title else piece
            metadata = {
                **_flat(record_metadata),
                **(extra_metadata or {}),
                "source": source + (f"#{record_id}" if record_id else ""),
                "file_id": file_id,
                "title": title,
                "chunk_index": number,
            }
            if record_id:
                metadata["record_id"] = record_id
            chunks.append(Chunk(chunk_id_for(file_id, record_id, number), content, metadata))
    return chunks
