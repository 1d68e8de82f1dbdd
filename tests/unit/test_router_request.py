"""What a caller sends the router and what it gets back beside the answer
(studio/router/request.py, errors.py, report.py): OpenAI-style 400s naming the field, unknown
fields kept, the last user message's text, ASCII report headers."""

from __future__ import annotations

import json

import pytest
from parallel_rag.studio.router.errors import RouterError, validated
from parallel_rag.studio.router.report import report_headers
from parallel_rag.studio.router.request import ChatRequest, last_user_text


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
