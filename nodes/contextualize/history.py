"""A conversation as the graph takes it: LangChain messages, or ``{"role", "content"}`` dicts as
the OpenAI API writes them, checked and brought to one shape.

What is refused names its field (``messages.3.role``) so a caller can fix it: an unknown role, a
content part that is not text (an image cannot be retrieved on), an empty conversation, a
conversation whose last turn is not the user's, a question over the query cap, or more history
than any request should carry (``MAX_MESSAGES``, ``MAX_CONVERSATION_CHARS``). Below those caps a
long conversation is accepted whole, but the graph only ever reads its recent turns
(``recent_turns``): a thousand turns cost no more than a few.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

MAX_MESSAGES = 5000
MAX_CONVERSATION_CHARS = 4_000_000
HISTORY_CHARS = 4000  # what resolution and generation read of the earlier turns, at most
HISTORY_TURNS = 6  # and at most this many earlier messages (three exchanges)
SOURCES_HEADER = "Sources:"  # the list the graph appends to its answer messages

_ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
    "system": SystemMessage,
    "developer": SystemMessage,
    "tool": ToolMessage,
}


class ConversationError(ValueError):
    """A malformed conversation; ``field`` is where, as the caller wrote it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def content_text(content: Any, field: str) -> str:
    """The text of a message's content: a string, or a list of text parts (OpenAI's
    ``{"type": "text", "text": ...}`` or LangChain's plain strings). Any other part is refused:
    there is nothing to retrieve on in an image or a file."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise ConversationError(
            field, f"expected text or a list of text parts, got {content!r:.60}"
        )
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ConversationError(f"{field}.{index}.text", "must be a string")
            texts.append(text)
        else:
            kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
            raise ConversationError(
                f"{field}.{index}", f"only text parts can be retrieved on, got {kind!r}"
            )
    return "".join(texts)


def _message(value: Any, index: int) -> BaseMessage:
    field = f"messages.{index}"
    if isinstance(value, BaseMessage):
        if not isinstance(value, HumanMessage | AIMessage | SystemMessage | ToolMessage):
            raise ConversationError(f"{field}.type", f"unsupported message type {value.type!r}")
        content_text(value.content, f"{field}.content")
        return value
    if not isinstance(value, Mapping):
        raise ConversationError(
            field, f"expected a message or a role/content dict, got {value!r:.60}"
        )
    role = value.get("role", value.get("type"))
    if role not in _ROLES:
        raise ConversationError(
            f"{field}.role", f"unknown role {role!r}; one of {', '.join(sorted(set(_ROLES)))}"
        )
    unknown = set(value) - {"role", "type", "content", "name", "id", "tool_calls", "tool_call_id"}
    if unknown:
        raise ConversationError(f"{field}.{sorted(unknown)[0]}", "unknown field")
    text = content_text(value.get("content"), f"{field}.content")
    cls = _ROLES[role]
    kwargs: dict[str, Any] = {}
    for key in ("name", "id"):
        if isinstance(value.get(key), str):
            kwargs[key] = value[key]
    if cls is ToolMessage:
        kwargs["tool_call_id"] = str(value.get("tool_call_id") or "")
    return cls(content=text, **kwargs)


def coerce_messages(value: Any, *, max_question_chars: int) -> list[BaseMessage]:
    """A conversation checked and as LangChain messages; the last must be the user's
    question (non-empty, at most ``max_question_chars``)."""
    if isinstance(value, BaseMessage | Mapping) or not isinstance(value, Sequence):
        raise ConversationError("messages", "expected a list of messages")
    if isinstance(value, str):
        raise ConversationError("messages", "expected a list of messages, got a string")
    if not value:
        raise ConversationError("messages", "the conversation is empty")
    if len(value) > MAX_MESSAGES:
        raise ConversationError(
            "messages",
            f"{len(value)} messages, at most {MAX_MESSAGES}: send the recent turns, or keep "
            "the conversation in a thread",
        )
    messages = [_message(item, index) for index, item in enumerate(value)]
    total = sum(len(m.text) for m in messages)
    if total > MAX_CONVERSATION_CHARS:
        raise ConversationError(
            "messages", f"{total} characters of conversation, at most {MAX_CONVERSATION_CHARS}"
        )
    last = messages[-1]
    field = f"messages.{len(messages) - 1}"
    if not isinstance(last, HumanMessage):
        raise ConversationError(
            f"{field}.role", f"the last message must be the user's question, got {last.type!r}"
        )
    question = last.text
    if not question.strip():
        raise ConversationError(f"{field}.content", "the question must not be empty")
    if len(question) > max_question_chars:
        raise ConversationError(
            f"{field}.content",
            f"the question is {len(question)} characters, at most {max_question_chars}",
        )
    return messages


_SOURCES_BLOCK = re.compile(rf"\n\s*{re.escape(SOURCES_HEADER)}\s*\n(?:\s*\[\d+\][^\n]*\n?)+\s*$")


def answer_text(message: BaseMessage) -> str:
    """An assistant turn's answer as written, without the sources list the graph appends."""
    return _SOURCES_BLOCK.sub("", message.text).strip()


@dataclass(frozen=True)
class Turn:
    """One earlier message the graph reads: who said it and what (answers without sources)."""

    role: str  # "user" or "assistant"
    text: str


def recent_turns(messages: Sequence[AnyMessage]) -> list[Turn]:
    """The earlier user and assistant turns before the last question, newest last, at most
    ``HISTORY_TURNS`` messages and ``HISTORY_CHARS`` characters (a long turn is cut to the
    budget). System and tool messages are not turns; nothing older than the budget is read."""
    turns: list[Turn] = []
    budget = HISTORY_CHARS
    for message in reversed(messages[:-1]):
        if len(turns) >= HISTORY_TURNS or budget <= 0:
            break
        if isinstance(message, HumanMessage):
            role, text = "user", message.text.strip()
        elif isinstance(message, AIMessage):
            role, text = "assistant", answer_text(message)
        else:
            continue
        if not text:
            continue
        text = text[:budget]
        budget -= len(text)
        turns.append(Turn(role, text))
    turns.reverse()
    return turns
