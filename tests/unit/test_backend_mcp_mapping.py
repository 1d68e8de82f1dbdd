"""The ``mcp`` backend's pure parts: the arguments template and the result mapping (the real
server round trips are in ``tests/integration/test_backend_mcp.py``)."""

from __future__ import annotations

import pytest
from mcp_types import CallToolResult, ImageContent, TextContent
from parallel_rag.backends.mcp.mapping import render_arguments, result_documents, text_id
from parallel_rag.backends.mcp.settings import MCPSettings
from parallel_rag.backends.shared.json_http import BackendResponseError
from pydantic import ValidationError

VALUES = {
    "user_content": 'say "hi"',
    "top_k": 3,
    "filters": {"tenant": "acme"},
    "decision_name": None,
}


def settings(**fields) -> MCPSettings:
    return MCPSettings(server_name="s", tool_name="t", **fields)


def test_whole_placeholders_become_json_values_and_embedded_ones_text():
    template = {
        "query": "${user_content}",
        "limit": "${ top_k }",
        "where": {"all": ["${filters}"]},
        "route": "${decision_name}",
        "prompt": "find: ${user_content} (top ${top_k}, ${filters})",
        "fixed": 7,
    }
    assert render_arguments(template, VALUES) == {
        "query": 'say "hi"',
        "limit": 3,
        "where": {"all": [{"tenant": "acme"}]},
        "route": None,
        "prompt": 'find: say "hi" (top 3, {"tenant": "acme"})',
        "fixed": 7,
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"q": "${query}"}, "unknown placeholder(s) ['query']"),
        ({"k": "${top_k}"}, "${user_content}"),
    ],
)
def test_template_errors_name_the_placeholder(arguments, message):
    with pytest.raises(ValidationError) as caught:
        settings(arguments=arguments)
    assert message in str(caught.value)


def test_filters_placeholder_is_detected_anywhere():
    assert not settings().takes_filters
    assert settings(arguments={"q": "${user_content}", "w": {"f": "${filters}"}}).takes_filters


def test_structured_results_are_mapped():
    result = CallToolResult(
        content=[],
        structured_content={
            "data": {"hits": [{"key": 7, "text": "seven", "rank": 2.5, "meta": {"a": 1}}]}
        },
    )
    mapped = settings(
        results_path="data.hits",
        id_field="key",
        content_field="text",
        score_field="rank",
        metadata_field="meta",
    )
    (doc,) = result_documents(result, mapped, "here")
    assert (doc.id, doc.page_content, doc.metadata) == (
        "7",
        "seven",
        {"a": 1, "retrieval_score": 2.5},
    )

    flat = settings(metadata_field=None, score_field=None)
    result = CallToolResult(
        content=[], structured_content={"results": [{"id": "x", "content": "c", "lang": "en"}]}
    )
    (doc,) = result_documents(result, flat, "here")
    assert doc.metadata == {"lang": "en", "retrieval_score": 0.0}


def test_text_blocks_are_documents_with_ids_from_their_text():
    result = CallToolResult(
        content=[TextContent(type="text", text="a"), TextContent(type="text", text="b")]
    )
    docs = result_documents(result, settings(), "here")
    assert [d.id for d in docs] == [text_id("a"), text_id("b")]
    assert [d.metadata["retrieval_score"] for d in docs] == [1.0, 0.5]
    assert text_id("a") == text_id("a") != text_id("b")


@pytest.mark.parametrize(
    ("structured", "content", "message"),
    [
        ({"results": {"id": 1}}, [], "structuredContent.results: expected a list, got dict"),
        ({"other": []}, [], "structuredContent: missing field 'results'"),
        ({"results": [{"id": "x"}]}, [], "results[0]: missing field 'content'"),
        ({"results": [{"id": "x", "content": 3, "score": 1}]}, [], "'content' is not a string"),
        ({"results": [{"id": "x", "content": "c", "score": "hi"}]}, [], "is not a number"),
        (None, [ImageContent(type="image", data="AA==", mime_type="image/png")], "no text content"),
    ],
)
def test_malformed_results_are_errors_naming_where(structured, content, message):
    result = CallToolResult(content=content, structured_content=structured)
    with pytest.raises(BackendResponseError) as caught:
        result_documents(result, settings(), "MCP tool 't'")
    assert message in str(caught.value)


def test_bounded_lines_split_across_chunks_and_refuse_a_line_over_the_limit():
    from parallel_rag.backends.mcp.errors import ResponseTooLargeError
    from parallel_rag.backends.mcp.transport import BoundedLines

    lines = BoundedLines(lambda: 5)
    assert lines.feed(b"ab") == []
    assert lines.feed(b"c\nde") == [b"abc"]
    assert lines.feed(b"fgh\n\n12345\n") == [b"defgh", b"", b"12345"]  # exactly the limit passes
    assert lines.feed(b"1234") == []
    with pytest.raises(ResponseTooLargeError, match="longer than 5 bytes"):
        lines.feed(b"56")  # no newline yet: refused as soon as it runs past the limit
    assert len(lines.pending) == 0, "nothing of the refused line is kept"

    limit = [3]
    raised = BoundedLines(lambda: limit[0])
    limit[0] = 6  # a cap raised later applies to the next lines
    assert raised.feed(b"abcdef\n") == [b"abcdef"]
