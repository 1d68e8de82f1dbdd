"""JSONL and CSV: a line (row) a record, with ``text`` (or ``content``), optional ``id``/``_id``
and ``title``; JSONL's ``metadata`` object, and CSV's other columns, become chunk metadata."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parallel_rag.studio.documents.base import (
    BadFileError,
    Record,
    Segment,
    decode_text,
)


def _record(where: str, fields: dict[str, Any], number: int, metadata: dict[str, Any]) -> Record:
    body = fields.get("text", fields.get("content"))
    if not isinstance(body, str) or not body.strip():
        raise BadFileError(f"{where}: field 'text' (or 'content') is missing")
    record_id = str(fields.get("id", fields.get("_id", number)))
    title = str(fields.get("title") or "")
    return Record(record_id, title, [Segment(body)], metadata)


def convert_jsonl(path: Path, data: bytes) -> list[Record]:
    return list(_jsonl(path, decode_text(path, data)))


def _jsonl(path: Path, text: str) -> Iterator[Record]:
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as error:
            raise BadFileError(f"{path}:{line_number}: not valid JSON: {error.msg}") from None
        if not isinstance(fields, dict):
            raise BadFileError(f"{path}:{line_number}: each line must be a JSON object")
        metadata = fields.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise BadFileError(f"{path}:{line_number}: field 'metadata' must be an object")
        yield _record(f"{path}:{line_number}", fields, line_number, metadata)


RESERVED_COLUMNS = {"text", "content", "id", "_id", "title"}


def convert_csv(path: Path, data: bytes) -> list[Record]:
    """A header row, then one record per row; columns other than the reserved ones are kept
    as metadata. Line numbers in errors count the header as line 1."""
    text = decode_text(path, data)
    try:
        rows = csv.DictReader(io.StringIO(text, newline=""))
        columns = rows.fieldnames or []
        if "text" not in columns and "content" not in columns:
            raise BadFileError(
                f"{path}: CSV needs a 'text' (or 'content') column; found: {', '.join(columns)}"
            )
        records = []
        for row in rows:
            line = rows.line_num
            if not any((value or "").strip() for value in row.values() if isinstance(value, str)):
                continue
            extra = {k: v for k, v in row.items() if k not in RESERVED_COLUMNS and k and v}
            records.append(_record(f"{path}:{line}", row, line, extra))
        return records
    except csv.Error as error:
        raise BadFileError(f"{path}: not valid CSV: {error}") from None
