"""What a caller sends the router: the OpenAI chat-completion body (every field the router does
not read is kept and forwarded), the preview body, and the router's own ``rag`` field
(``{top_k, filters, tenant}``: only these, never an endpoint, key or path)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import Request
from parallel_rag.graph.state import MAX_TOP_K, FilterValue
from parallel_rag.studio.router.configuration import AUTO_MODEL
from parallel_rag.studio.router.errors import RouterError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: StrictStr


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[ContentPart] | None = None


class RagOptions(BaseModel):
    """The router's own per-request settings (only these: no endpoint, key or path)."""

    model_config = ConfigDict(extra="forbid")

    top_k: StrictInt | None = Field(default=None, ge=1, le=MAX_TOP_K)
    filters: dict[str, FilterValue] | None = None
    tenant: StrictStr | None = Field(default=None, min_length=1, max_length=128)


class ChatRequest(_Open):
    model: StrictStr = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    rag: RagOptions | None = None


class PreviewRequest(_Open):
    model: StrictStr = Field(default=AUTO_MODEL, min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    rag: RagOptions | None = None


async def read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise RouterError(
            400, f"request body is not valid JSON: {error}", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise RouterError(
            400,
            f"request body must be a JSON object, got {type(data).__name__}",
            code="invalid_json",
        )
    return data


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text a route is matched and retrieved on: the last user message's."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content")).strip()
    return ""
