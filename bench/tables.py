"""Markdown tables of measured figures: one writer for every results file and ``RESULTS.md``,
so a column of numbers is right-aligned and a missing figure reads "–" everywhere."""

from __future__ import annotations

import math
from typing import Any


def cell(value: Any, digits: int = 3) -> str:
    """A figure as a table cell: a float to ``digits`` places, a missing one (None, NaN) "–"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    """A pipe table; ``align`` has one letter a column, ``l`` or ``r`` (default: the first
    column left, the figures right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
