"""What every converter returns, and the errors it raises.

A converter turns one file into ``Record``s (one for a document, one per line or row for
JSONL/CSV), each a list of ``Segment``s: the text of one page, slide or the whole body, with
the structure metadata (``page``, ``slide``) the chunker copies onto every chunk cut from it.
Chunks are cut inside a segment, never across two, so a PDF chunk never spans pages.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

DOCUMENTS_EXTRA = "documents"


class DocumentLoadError(ValueError):
    """A file could not be read as a document; the message names the file (and line)."""


class BadFileError(DocumentLoadError):
    """One file is unusable (corrupt, encrypted, empty, no text, too large...): ingest lists it
    and, with ``--skip-bad-files``, indexes the others."""


class MissingExtraError(DocumentLoadError):
    """A converter's package is not installed: the message names the extra that brings it.
    Not a bad file: the setup is missing, so ingest stops whatever the mode."""


@dataclass
class Segment:
    """A stretch of text no chunk crosses, with the metadata of where it sits (``page``,
    ``slide``). ``markdown`` text gets a markdown-aware splitter and ``section`` metadata."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    markdown: bool = False


@dataclass
class Record:
    """One document of a file: ``record_id`` is empty for a file that is one document, the
    line's or row's id for JSONL/CSV (it goes into chunk ids and ``source``)."""

    record_id: str
    title: str
    segments: list[Segment]
    metadata: dict[str, Any] = field(default_factory=dict)


def require(module: str, path: Path) -> ModuleType:
    """Import a converter's package, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(
            f"{path}: reading {path.suffix} files needs the '{DOCUMENTS_EXTRA}' extra: "
            f"pip install 'parallel-rag[{DOCUMENTS_EXTRA}]'"
        ) from None


def decode_text(path: Path, data: bytes) -> str:
    """Strict UTF-8 text of a file with a text extension; binary or empty content is a bad
    file, named with the reason."""
    if b"\x00" in data:
        raise BadFileError(f"{path}: binary content (NUL bytes) in a text file; not ingested")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadFileError(
            f"{path}: not valid UTF-8 (byte {error.start}); nothing was ingested"
        ) from None
    if not text.strip():
        raise BadFileError(f"{path}: empty file (no text)")
    return text
