"""Markdown and plain text, and the heading path (``section``) of any offset in Markdown.

HTML and DOCX are converted to Markdown first, so their headings give sections the same way.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path

from parallel_rag.studio.documents.base import Record, Segment, decode_text

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
SECTION_SEPARATOR = " > "


class SectionIndex:
    """The heading path in force at each offset of a Markdown text (fenced code skipped)."""

    def __init__(self, text: str):
        self.offsets: list[int] = []
        self.paths: list[str] = []
        stack: list[tuple[int, str]] = []
        offset, fenced = 0, False
        for line in text.splitlines(keepends=True):
            if _FENCE.match(line):
                fenced = not fenced
            match = None if fenced else _HEADING.match(line.rstrip("\r\n"))
            if match:
                level, name = len(match.group(1)), match.group(2).strip()
                stack = [(lvl, n) for lvl, n in stack if lvl < level] + [(level, name)]
                self.offsets.append(offset)
                self.paths.append(SECTION_SEPARATOR.join(n for _, n in stack))
            offset += len(line)

    def first_heading(self) -> str:
        return self.paths[0].split(SECTION_SEPARATOR)[-1] if self.paths else ""

    def at(self, offset: int) -> str:
        """The path of the last heading starting at or before ``offset`` ('' before any)."""
        position = bisect.bisect_right(self.offsets, offset) - 1
        return self.paths[position] if position >= 0 else ""


def markdown_title(text: str, fallback: str) -> str:
    """The first line if it is a heading (``# Title``), else ``fallback``."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return first.lstrip("#").strip() if first.startswith("#") else fallback


def convert_text(path: Path, data: bytes) -> list[Record]:
    """A Markdown or text file: one record, one segment (Markdown keeps its headings)."""
    text = decode_text(path, data)
    markdown = path.suffix.lower() in {".md", ".markdown"}
    title = markdown_title(text, path.stem)
    return [Record("", title, [Segment(text, markdown=markdown)])]
