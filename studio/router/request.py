"""What a caller sends the router: the OpenAI chat-completion body (every field the router does
not read is kept and forwarded), the preview body, and the router's own ``rag`` field
(``{top_k, filters, tenant}``: only these, never an endpoint, key or path); and what of the
conversation retrieval reads (``conversation_turns``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import Request
from langchain_core.messages import AIMessage
from parallel_rag.graph.state import MAX_QUERY_CHARS, MAX_TOP_K, FilterValue
from parallel_rag.nodes.contextualize.history import HISTORY_CHARS, HISTORY_TURNS, answer_text
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


def conversation_turns(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """What of an OpenAI conversation retrieval reads: the last user message's text (the
    question, cut at the graph's query cap, as before) and the user and assistant text turns
    before it, as ``{"role", "content"}`` dicts, the question last; empty when the last user
    message has no text (nothing to retrieve for).

    The router forwards whatever the upstream model takes, so nothing here refuses a message:
    system, developer and tool messages are not turns, an assistant turn that only calls tools
    has no text, and of a content-part list only the text parts count (an image cannot be
    retrieved on). What comes after the question (an assistant's tool calls and their results,
    in a tool loop) is not history. Only the turns the graph reads are sent (the most recent
    ``HISTORY_TURNS``, each cut at ``HISTORY_CHARS``, answers without a trailing sources list),
    so a long conversation costs no more than a short one and no turn can exceed the graph's
    caps."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if _role(messages[i]) == "user"), None)
    if last is None:
        return []
    question = text_of(messages[last].get("content")).strip()[:MAX_QUERY_CHARS]
    if not question:
        return []
    earlier: list[dict[str, str]] = []
    for message in reversed(messages[:last]):
        if len(earlier) >= HISTORY_TURNS:
            break
        role = _role(message)
        if role not in ("user", "assistant"):
            continue
        text = text_of(message.get("content")).strip()
        if role == "assistant":
            text = answer_text(AIMessage(content=text))
        if text:
            earlier.append({"role": role, "content": text[:HISTORY_CHARS]})
    earlier.reverse()
    return [*earlier, {"role": "user", "content": question}]


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, Mapping) else None
