"""Injection of retrieved evidence into the caller's own conversation, every other message
kept: ``tool_role`` adds an assistant tool call and the tool message answering it after the
last user message (both present, so strict OpenAI-compatible servers accept the history);
``system_prompt`` prepends the evidence to the first system message (or adds one). The
evidence is formatted as the generate node formats it (numbered, delimited, neutralised, cut at
``max_context_length``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from parallel_rag.nodes.generate.evidence import EVIDENCE_CALL_ID, format_evidence
from parallel_rag.nodes.prompts import EVIDENCE_TOOL_CALL_CONTENT, EVIDENCE_TOOL_NAME


def evidence_call_id(messages: Sequence[Mapping[str, Any]]) -> str:
    """The tool call id of the evidence turn, distinct from any id already in the conversation."""
    taken = {
        str(call.get("id"))
        for message in messages
        for call in (message.get("tool_calls") or [])
        if isinstance(call, dict)
    } | {str(m.get("tool_call_id")) for m in messages if m.get("tool_call_id")}
    candidate, n = EVIDENCE_CALL_ID, 0
    while candidate in taken:
        n += 1
        candidate = f"{EVIDENCE_CALL_ID}_{n}"
    return candidate


def inject_tool_role(
    messages: Sequence[Mapping[str, Any]], evidence: str, query: str
) -> list[dict[str, Any]]:
    """After the last user message: an assistant turn calling the evidence tool and the tool
    message answering it (same ``tool_call_id``), so strict OpenAI-compatible servers accept
    the history. Other messages are kept as they were."""
    result = [dict(m) for m in messages]
    last_user = max((i for i, m in enumerate(result) if m.get("role") == "user"), default=None)
    at = len(result) if last_user is None else last_user + 1
    call_id = evidence_call_id(messages)
    call = {
        "role": "assistant",
        "content": EVIDENCE_TOOL_CALL_CONTENT,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": EVIDENCE_TOOL_NAME,
                    "arguments": json.dumps({"query": query}, ensure_ascii=False),
                },
            }
        ],
    }
    answer = {"role": "tool", "tool_call_id": call_id, "content": evidence}
    return result[:at] + [call, answer] + result[at:]


def inject_system_prompt(
    messages: Sequence[Mapping[str, Any]], evidence: str
) -> list[dict[str, Any]]:
    """The evidence prepended to the first system message, or a new system message first."""
    result = [dict(m) for m in messages]
    for message in result:
        if message.get("role") == "system":
            content = message.get("content")
            if isinstance(content, list):
                message["content"] = [{"type": "text", "text": evidence}, *content]
            elif content:
                message["content"] = f"{evidence}\n\n{content}"
            else:
                message["content"] = evidence
            return result
    return [{"role": "system", "content": evidence}, *result]


def inject(
    messages: Sequence[Mapping[str, Any]],
    documents: Sequence[Mapping[str, Any]],
    *,
    mode: str,
    max_context_length: int,
    query: str,
) -> list[dict[str, Any]]:
    evidence = format_evidence(documents, max_context_length)
    if mode == "system_prompt":
        return inject_system_prompt(messages, evidence)
    return inject_tool_role(messages, evidence, query)
