"""What goes to an MCP tool and what comes back: the ``arguments`` template filled with the
request (``render_arguments``) and a ``CallToolResult`` read as documents (``result_documents``:
structured output through the configured fields, else one document per text block)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from parallel_rag.backends.base import SCORE_KEY, scored_document
from parallel_rag.backends.mcp.settings import PLACEHOLDER, MCPSettings
from parallel_rag.backends.shared.json_http import BackendResponseError, require


def render_arguments(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with placeholders filled: a whole-string placeholder becomes its JSON
    value, one inside a longer string becomes its text (strings as they are, others as JSON)."""
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template.strip())
        if whole:
            return values[whole.group(1)]

        def text(match: re.Match[str]) -> str:
            value = values[match.group(1)]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

        return PLACEHOLDER.sub(text, template)
    if isinstance(template, Mapping):
        return {key: render_arguments(item, values) for key, item in template.items()}
    if isinstance(template, list | tuple):
        return [render_arguments(item, values) for item in template]
    return template


def text_id(text: str) -> str:
    """A stable id for a document known only by its text."""
    return "mcp-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BackendResponseError(f"{where}: score {value!r} is not a number")
    return float(value)


def result_documents(result: Any, settings: MCPSettings, where: str) -> list[Document]:
    """Documents from a ``CallToolResult``: structured output through the result mapping, or
    one document per text content block."""
    structured = result.structured_content
    if structured is not None:
        items: Any = structured
        walked = f"{where}: structuredContent"
        for part in settings.results_path.split(".") if settings.results_path else []:
            items = require(items, part, walked)
            walked = f"{walked}.{part}"
        if not isinstance(items, list):
            raise BackendResponseError(f"{walked}: expected a list, got {type(items).__name__}")
        return [_item_document(item, settings, f"{walked}[{i}]") for i, item in enumerate(items)]
    blocks = list(result.content or [])
    texts = [block.text for block in blocks if getattr(block, "type", None) == "text"]
    if blocks and not texts:
        kinds = sorted({str(getattr(block, "type", "?")) for block in blocks})
        raise BackendResponseError(f"{where}: no text content (got {', '.join(kinds)})")
    return [
        scored_document(text_id(text), text, {}, 1.0 / rank)
        for rank, text in enumerate(texts, start=1)
    ]


def _item_document(item: Any, settings: MCPSettings, where: str) -> Document:
    s = settings
    doc_id = require(item, s.id_field, where)
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        raise BackendResponseError(f"{where}: field '{s.id_field}' is not a string or integer")
    content = require(item, s.content_field, where)
    if not isinstance(content, str):
        raise BackendResponseError(f"{where}: field '{s.content_field}' is not a string")
    score = _score(require(item, s.score_field, where), where) if s.score_field else 0.0
    if s.metadata_field:
        metadata = item.get(s.metadata_field) or {}
        if not isinstance(metadata, Mapping):
            raise BackendResponseError(f"{where}: field '{s.metadata_field}' is not an object")
    else:
        skip = {s.id_field, s.content_field, s.score_field}
        metadata = {key: value for key, value in item.items() if key not in skip}
    metadata = {key: value for key, value in metadata.items() if key != SCORE_KEY}
    return scored_document(str(doc_id), content, metadata, score)
