"""Files to text with structure: one converter module per format, chosen by suffix.

``convert_file`` is the one entry: it applies the size cap, reads the bytes once and turns any
failure into a one-line ``BadFileError`` naming the file and the reason (never a traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from parallel_rag.studio.documents.base import (
    DOCUMENTS_EXTRA,
    BadFileError,
    DocumentLoadError,
    MissingExtraError,
    Record,
    Segment,
)
from parallel_rag.studio.documents.html import convert_html
from parallel_rag.studio.documents.markdown import convert_text
from parallel_rag.studio.documents.office import convert_docx, convert_pptx
from parallel_rag.studio.documents.pdf import convert_pdf
from parallel_rag.studio.documents.records import convert_csv, convert_jsonl

Converter = Callable[[Path, bytes], list[Record]]
CONVERTERS: dict[str, Converter] = {
    ".md": convert_text,
    ".markdown": convert_text,
    ".txt": convert_text,
    ".jsonl": convert_jsonl,
    ".csv": convert_csv,
    ".pdf": convert_pdf,
    ".html": convert_html,
    ".htm": convert_html,
    ".docx": convert_docx,
    ".pptx": convert_pptx,
}
SUPPORTED_SUFFIXES = set(CONVERTERS)
DEFAULT_MAX_FILE_MB = 200.0


def convert_file(path: Path, *, max_file_mb: float = DEFAULT_MAX_FILE_MB) -> list[Record]:
    """The records of one file; a file that cannot be used raises ``BadFileError``."""
    converter = CONVERTERS[path.suffix.lower()]
    size = path.stat().st_size
    if size > max_file_mb * 1024 * 1024:
        raise BadFileError(
            f"{path}: {size / 1024 / 1024:.1f} MB is over the {max_file_mb:g} MB size cap "
            "(--max-file-mb)"
        )
    try:
        return converter(path, path.read_bytes())
    except DocumentLoadError:
        raise
    except Exception as error:  # a converter library's own failure on a malformed file
        kind = path.suffix.lstrip(".").upper()
        raise BadFileError(
            f"{path}: cannot be read as {kind} ({type(error).__name__}: {error})"
        ) from None


__all__ = [
    "CONVERTERS",
    "DEFAULT_MAX_FILE_MB",
    "DOCUMENTS_EXTRA",
    "SUPPORTED_SUFFIXES",
    "BadFileError",
    "DocumentLoadError",
    "MissingExtraError",
    "Record",
    "Segment",
    "convert_file",
]
