"""Milvus boolean expressions: request filters translated into Milvus's expression language
(``tenant == "acme"``, or ``metadata["tenant"] == "acme"`` in a JSON metadata field), and the
load-time check of a configured static ``filter_expression`` (one plain boolean expression: no
``;``, no comments, no SQL statement keywords, balanced brackets). Used by ``milvus.py``."""

from __future__ import annotations

import json
import re
from typing import Any

from parallel_rag.backends.base import MetadataFilter

FIELD_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,254}$"
MAX_EXPRESSION_CHARS = 2000
SQL_KEYWORDS = frozenset(
    "select insert update delete drop union create alter truncate exec execute grant revoke "
    "merge replace into from where join having table database declare commit rollback".split()
)
COMMENT_MARKERS = ("--", "/*", "*/", "//", "#")


def _outside_strings(expression: str) -> str:
    """The expression with every string literal's content blanked (quotes kept)."""
    out: list[str] = []
    quote: str | None = None
    escaped = False
    for char in expression:
        if quote is None:
            out.append(char)
            if char in ("'", '"'):
                quote = char
        elif escaped:
            escaped = False
            out.append(" ")
        elif char == "\\":
            escaped = True
            out.append(" ")
        elif char == quote:
            quote = None
            out.append(char)
        else:
            out.append(" ")
    if quote is not None:
        raise ValueError("unterminated string literal")
    return "".join(out)


def check_filter_expression(expression: str) -> str:
    """Refuse anything but a plain Milvus boolean expression; returns it stripped."""
    expression = expression.strip()
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    if ";" in expression:
        raise ValueError("';' is not allowed (one boolean expression only)")
    bare = _outside_strings(expression)
    for marker in COMMENT_MARKERS:
        if marker in bare:
            raise ValueError(f"comments are not allowed (found {marker!r})")
    words = {word.lower() for word in re.findall(r"[A-Za-z_]+", bare)}
    keywords = sorted(words & SQL_KEYWORDS)
    if keywords:
        raise ValueError(f"SQL keyword(s) not allowed: {', '.join(keywords)}")
    depth = {"(": 0, "[": 0}
    closing = {")": "(", "]": "["}
    for char in bare:
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            if depth[closing[char]] < 0:
                raise ValueError(f"unbalanced parentheses: unexpected {char!r}")
    if any(depth.values()):
        raise ValueError("unbalanced parentheses: unclosed '(' or '['")
    return expression


def milvus_literal(value: Any) -> str:
    """A filter value as a Milvus expression literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def milvus_field(key: str, metadata_field: str | None) -> str:
    if metadata_field:
        return f"{metadata_field}[{json.dumps(key, ensure_ascii=False)}]"
    if not re.match(FIELD_NAME, key):
        raise ValueError(f"filter key {key!r} is not a valid Milvus field name")
    return key


def milvus_expression(
    filters: MetadataFilter | None, metadata_field: str | None, static: str | None = None
) -> str | None:
    """Request filters in Milvus's expression language, AND-ed with the static expression."""
    clauses = [f"({static})"] if static else []
    for key, value in (filters or {}).items():
        clauses.append(f"{milvus_field(key, metadata_field)} == {milvus_literal(value)}")
    return " and ".join(clauses) or None
