"""What a caller sends the router and what it gets back beside the answer
(studio/router/request.py, errors.py, report.py): OpenAI-style 400s naming the field, unknown
fields kept, the last user message's text and the text turns retrieval reads of a
conversation, ASCII report headers."""

from __future__ import annotations

import json

import pytest
from parallel_rag.nodes.contextualize.history import HISTORY_CHARS, HISTORY_TURNS
from parallel_rag.studio.router.errors import RouterError, validated
from parallel_rag.studio.router.report import report_headers
from parallel_rag.studio.router.request import ChatRequest, conversation_turns, last_user_text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "user", "content": 1}]}, "messages.0.content"),
        ({"model": "m", "messages": [{"role": "user"}], "stream": 1}, "stream"),
        ({"model": "m", "messages": [{"role": "user"}], "rag": {"top_k": 0}}, "rag.top_k"),
        ({"model": "m", "messages": [{"role": "user"}], "rag": {"api_key": "x"}}, "rag.api_key"),
        (
            {"model": "m", "messages": [{"role": "user"}], "rag": {"filters": {"a": [1]}}},
            "rag.filters.a",
        ),
    ],
)
def test_request_errors_name_the_field(body, param):
    with pytest.raises(RouterError) as caught:
        validated(ChatRequest, body)
    assert caught.value.status == 400 and caught.value.param == param
    body = json.loads(caught.value.response().body)
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_unknown_fields_are_kept():
    request = validated(
        ChatRequest,
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": 2}},
    )
    assert request.model_extra == {"logit_bias": {"1": 2}}


def test_last_user_text_reads_text_parts():
    messages = [
        {"role": "user", "content": "old"},
        {"role": "user", "content": [{"type": "text", "text": "new"}, {"type": "image_url"}]},
        {"role": "assistant", "content": "x"},
    ]
    assert last_user_text(messages) == "new"


def test_report_headers_are_ascii():
    headers = report_headers(
        {
            "route": "docs",
            "reason": "model",
            "retrieval": True,
            "cache": "miss",
            "branches": [{"branch": "q0:dense", "status": "ok", "hits": 2}],
            "documents": ["d1", "dé,2"],
            "warnings": ["no context injected: café"],
        }
    )
    for value in headers.values():
        value.encode("ascii")
    assert headers["x-parallel-rag-branches"] == "q0:dense=ok:2"
    assert headers["x-parallel-rag-documents"] == "d1,d%C3%A9%2C2"


def test_conversation_turns_are_the_text_turns_up_to_the_question():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Cite sources."},
        {"role": "user", "content": [{"type": "text", "text": "Which bridge carries the A75?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "{...}"},
        {"role": "assistant", "content": "The Millau Viaduct.\n\nSources:\n[1] millau.md"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Who designed it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "later tool output"},
    ]
    assert conversation_turns(messages) == [
        {"role": "user", "content": "Which bridge carries the A75?"},
        {"role": "assistant", "content": "The Millau Viaduct."},
        {"role": "user", "content": "Who designed it?"},
    ]


def test_conversation_turns_keep_what_the_graph_reads_and_refuse_nothing():
    long_turn = "x" * 5_000_000  # far over the graph's conversation cap: cut, not refused
    messages = [{"role": "user", "content": long_turn}]
    for n in range(20):
        messages += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    messages.append({"role": "user", "content": "q" * 10_000})
    turns = conversation_turns(messages)
    assert len(turns) == HISTORY_TURNS + 1
    assert turns[0] == {"role": "user", "content": "question 17"}
    assert turns[-1] == {"role": "user", "content": "q" * 4000}  # the query cap, as before
    assert all(len(t["content"]) <= HISTORY_CHARS for t in turns)
    only_long = conversation_turns([{"role": "user", "content": long_turn}, messages[-1]])
    assert len(only_long[0]["content"]) == HISTORY_CHARS


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "x"}],
        [{"role": "user", "content": "  "}, {"role": "assistant", "content": "hi"}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
    ],
)
def test_no_question_no_turns(messages):
    assert conversation_turns(messages) == []
