"""Grounded LLM generation (issue 4): prompt construction in both injection modes (down to the
OpenAI wire format), prompt overrides, citations checked against the evidence, no model call
without evidence, the failure policy, and token streaming out of the graph.

``SMOLLM2_*`` replies were captured from SmolLM2-135M-Instruct behind llama-cpp-python's server.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from parallel_rag.graph import build_graph
from parallel_rag.nodes import prompts
from parallel_rag.nodes.chat_models import ChatModelSettings, make_chat_model
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.generate.chat import ChatModelGenerator
from parallel_rag.nodes.generate.citations import (
    check_citations,
    cited_numbers,
    drop_invalid_citations,
)
from parallel_rag.nodes.generate.evidence import format_evidence
from parallel_rag.nodes.prompts import INSUFFICIENT_EVIDENCE

QUESTION = "When did the Golden Gate Bridge open?"
DOCS = [
    {
        "id": "ada",
        "content": "Ada Lovelace published the first algorithm for the Analytical Engine in 1843.",
        "metadata": {"source": "ada-lovelace.md"},
    },
    {
        "id": "gg",
        "content": "The Golden Gate Bridge opened in 1937 in San Francisco.",
        "metadata": {"source": "golden-gate-bridge.md"},
    },
    {
        "id": "arrol",
        "content": "Sir William Arrol's company built the Forth Bridge.",
        "metadata": {},
    },
]


def openai_payload(messages) -> list[dict]:
    """The ``messages`` array a ChatOpenAI pointed at a compatible server would send."""
    model = make_chat_model(ChatModelSettings(model="m", base_url="http://127.0.0.1:9/v1"))
    return model._get_request_payload(messages)["messages"]


# ---------------------------------------------------------------- tool_role


def test_tool_role_conversation(fakes):
    model = fakes.RecordingChatModel(responses=["It opened in 1937 [2]."])
    assert ChatModelGenerator(model).generate(QUESTION, DOCS).cited_numbers == [2]
    ((system, human, assistant, tool),) = model.calls
    assert system == SystemMessage(prompts.GENERATOR_SYSTEM_PROMPT)
    assert human == HumanMessage(QUESTION)
    assert isinstance(assistant, AIMessage)
    assert assistant.content == prompts.EVIDENCE_TOOL_CALL_CONTENT
    (call,) = assistant.tool_calls
    assert call["name"] == prompts.EVIDENCE_TOOL_NAME and call["args"] == {"query": QUESTION}
    assert isinstance(tool, ToolMessage) and tool.tool_call_id == call["id"]
    assert tool.content == format_evidence(DOCS, 10_000)


def test_tool_role_on_the_wire_is_what_strict_servers_accept():
    """Assistant turn with a non-null content and a tool call, then the tool turn answering
    that call's id (llama.cpp's server refuses ``content: null``, checked in integration)."""
    messages = ChatModelGenerator(GenericFakeChatModel(messages=iter([]))).build_messages(
        QUESTION, DOCS
    )
    system, user, assistant, tool = openai_payload(messages)
    assert [m["role"] for m in (system, user, assistant, tool)] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]
    assert isinstance(assistant["content"], str) and assistant["content"]
    (call,) = assistant["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == prompts.EVIDENCE_TOOL_NAME
    assert tool["tool_call_id"] == call["id"]
    assert tool["content"].startswith(prompts.EVIDENCE_HEADER)
    assert (
        "[2] (source: golden-gate-bridge.md)\n<evidence>\nThe Golden Gate Bridge opened"
        in tool["content"]
    )
    assert "[3] (source: arrol)\n<evidence>" in tool["content"]  # no source: the id names the block


def test_tool_role_without_a_system_prompt_sends_no_system_message(fakes):
    model = fakes.RecordingChatModel(responses=["1937 [2]"])
    ChatModelGenerator(model, system_prompt="").generate(QUESTION, DOCS)
    assert [type(m) for m in model.calls[0]] == [HumanMessage, AIMessage, ToolMessage]


# ---------------------------------------------------------------- system_prompt


def test_system_prompt_mode_prepends_evidence_to_the_system_message(fakes):
    model = fakes.RecordingChatModel(responses=["1937 [2]"])
    ChatModelGenerator(model, injection_mode="system_prompt").generate(QUESTION, DOCS)
    ((system, human),) = model.calls
    assert (
        system.content == format_evidence(DOCS, 10_000) + "\n\n" + prompts.GENERATOR_SYSTEM_PROMPT
    )
    assert human == HumanMessage(QUESTION)
    assert [m["role"] for m in openai_payload(model.calls[0])] == ["system", "user"]


def test_system_prompt_mode_without_a_system_prompt_makes_a_new_one(fakes):
    model = fakes.RecordingChatModel(responses=["1937 [2]"])
    ChatModelGenerator(model, injection_mode="system_prompt", system_prompt="").generate(
        QUESTION, DOCS
    )
    ((system, _),) = model.calls
    assert system == SystemMessage(format_evidence(DOCS, 10_000))


@pytest.mark.parametrize("mode", ["tool_role", "system_prompt"])
def test_system_prompt_override_and_context_limit_from_config(fakes, mode):
    model = fakes.RecordingChatModel(responses=["1937 [1]"])
    docs = [fakes.doc(d["id"], d["content"], 1.0, **d["metadata"]) for d in DOCS]
    graph = build_graph(
        {
            "generator": {
                "kind": "llm",
                "injection_mode": mode,
                "system_prompt": "Be brief; cite [n].",
                "max_context_length": 130,
            }
        },
        retrievers={"a": fakes.ListRetriever(docs=docs), "b": fakes.ListRetriever(docs=docs)},
        generator_model=model,
    )
    graph.invoke({"query": QUESTION})
    (messages,) = model.calls
    if mode == "tool_role":
        assert messages[0] == SystemMessage("Be brief; cite [n].")
        evidence = messages[-1].content
    else:
        evidence, instruction = messages[0].content.rsplit("\n\n", 1)
        assert instruction == "Be brief; cite [n]."
    assert len(evidence) <= 130 and evidence.endswith("</evidence>\n...")
    assert evidence.startswith(prompts.EVIDENCE_HEADER)


def test_the_default_system_prompt_demands_grounded_cited_answers():
    text = prompts.GENERATOR_SYSTEM_PROMPT
    assert "ONLY" in text and "[1]" in text and INSUFFICIENT_EVIDENCE in text
    assert "untrusted" in text


# ---------------------------------------------------------------- citations


@pytest.mark.parametrize(
    ("answer", "valid", "invalid"),
    [
        ("1937 [2].", [2], []),
        ("1937 [1, 2] and [3].", [1, 2, 3], []),
        ("1937 [2][1]", [2, 1], []),
        ("1937 [2; 3]", [2, 3], []),
        ("1937 [2, 9] [0]", [2], [9, 0]),
        ("no citation", [], []),
        ("a link [text](http://x) and [b]", [], []),
    ],
)
def test_citation_parsing(answer, valid, invalid):
    assert cited_numbers(answer, 3) == (valid, invalid)


@pytest.mark.parametrize(
    ("answer", "cleaned"),
    [
        ("Opened in 1937 [2], see [9].", "Opened in 1937 [2], see."),
        ("Opened [2, 9] in 1937 [1,7].", "Opened [2] in 1937 [1]."),
        ("Opened [4][2].", "Opened [2]."),
        ("Opened [9] in 1937 [2]", "Opened in 1937 [2]"),
        ("[9] Opened [2]", "Opened [2]"),
        ("Opened [2].", "Opened [2]."),
    ],
)
def test_invalid_citations_are_dropped(answer, cleaned):
    assert drop_invalid_citations(answer, 3) == cleaned


def test_invalid_citation_is_dropped_and_warned():
    generated = check_citations("Opened in 1937 [2] and again [7].", 3)
    assert generated.answer == "Opened in 1937 [2] and again."
    assert generated.cited_numbers == [2]
    (warning,) = generated.warnings
    assert "[7]" in warning and "1..3" in warning


def test_answer_without_citations_is_passed_on_with_a_warning():
    generated = check_citations("The Golden Gate Bridge opened in 1937.", 3)
    assert generated.cited_numbers == []
    assert generated.warnings == ["generator answer cites no evidence block"]


def test_insufficient_evidence_reply_needs_no_citation():
    assert check_citations(f"  {INSUFFICIENT_EVIDENCE}\n", 3).warnings == []


SMOLLM2_INVENTED_BLOCK = (
    "The Golden Gate Bridge opened in 1937 in San Francisco. Its main span is 1,280 metres long."
    "\n\n[4] (source: bridges-san-ferris-downtown.md)\nA bridge was built to connect the Golden "
    "Gate Bridge to the San Francisco International Airport."
)
SMOLLM2_ECHOED_BLOCKS = (
    "The evidence for this question is:\n[1] (source: golden-gate-bridge.md)\nAda Lovelace "
    "published the first algorithm intended for the Analytical Engine in 1843.\n\n"
    "[2] (source: golden-gate-bridge.md)\nThe Golden Gate Bridge opened in 1937 in San Francisco."
    "\n\n[3] (source: bridges.md)"
)


def test_smollm2_invented_evidence_block_is_not_a_citation():
    generated = check_citations(SMOLLM2_INVENTED_BLOCK, 3)
    assert "[4]" not in generated.answer
    assert "\n\n(source: bridges-san-ferris-downtown.md)" in generated.answer
    assert generated.cited_numbers == []
    assert len(generated.warnings) == 2 and "[4]" in generated.warnings[0]


def test_smollm2_echoed_block_headers_count_as_valid_numbers():
    generated = check_citations(SMOLLM2_ECHOED_BLOCKS, 3)
    assert generated.cited_numbers == [1, 2, 3] and generated.warnings == []


def test_citations_in_the_result_name_the_documents(fakes):
    docs = [fakes.doc(d["id"], d["content"], 1.0, **d["metadata"]) for d in DOCS]
    model = fakes.StaticChatModel(text="Opened in 1937 [2] [5].")
    result = build_graph(
        {},
        retrievers={"a": fakes.ListRetriever(docs=docs), "b": fakes.ListRetriever(docs=docs)},
        generator_model=model,
    ).invoke({"query": QUESTION})
    assert result["answer"] == "Opened in 1937 [2]."
    assert result["citations"] == [{"number": 2, "id": "gg", "source": "golden-gate-bridge.md"}]
    assert any("[5]" in w for w in result["warnings"])


# ---------------------------------------------------------------- no evidence, failures


@pytest.mark.parametrize("mode", ["tool_role", "system_prompt"])
async def test_no_evidence_never_calls_the_model(fakes, mode):
    model = fakes.ExplodingChatModel()
    generator = ChatModelGenerator(model, injection_mode=mode)
    assert generator.generate(QUESTION, []).answer == INSUFFICIENT_EVIDENCE
    generated = await asyncio.to_thread(generator.generate, QUESTION, [])
    assert generated.answer == INSUFFICIENT_EVIDENCE
    graph = build_graph(
        {"generator": {"kind": "llm", "injection_mode": mode}},
        retrievers={"a": fakes.ListRetriever(), "b": fakes.FailingRetriever()},
        generator_model=model,
    )
    result = await graph.ainvoke({"query": QUESTION})
    assert result["answer"] == INSUFFICIENT_EVIDENCE and result["citations"] == []
    assert model.calls == 0


def one_doc_retrievers(fakes):
    doc = fakes.doc("gg", DOCS[1]["content"], 1.0, source="golden-gate-bridge.md")
    return {"a": fakes.ListRetriever(docs=[doc]), "b": fakes.ListRetriever(docs=[doc])}


@pytest.mark.parametrize(
    ("settings", "warned"),
    [({}, True), ({"on_failure": "warn"}, True), ({"generator": {"on_failure": "skip"}}, False)],
)
def test_failing_model_under_skip_or_warn_answers_insufficient_evidence(fakes, settings, warned):
    graph = build_graph(
        settings, retrievers=one_doc_retrievers(fakes), generator_model=fakes.ExplodingChatModel()
    )
    result = graph.invoke({"query": QUESTION})
    assert result["answer"] == INSUFFICIENT_EVIDENCE and result["citations"] == []
    assert [d["id"] for d in result["documents"]] == ["gg"]  # retrieval is still reported
    generator_warnings = [w for w in result["warnings"] if w.startswith("generator failed")]
    assert len(generator_warnings) == (1 if warned else 0)


@pytest.mark.parametrize(
    "settings",
    [{"on_failure": "block"}, {"on_failure": "skip", "generator": {"on_failure": "block"}}],
)
async def test_failing_model_under_block_stops_the_request(fakes, settings):
    graph = build_graph(
        settings, retrievers=one_doc_retrievers(fakes), generator_model=fakes.ExplodingChatModel()
    )
    with pytest.raises(BlockedError) as caught:
        await graph.ainvoke({"query": QUESTION})
    assert caught.value.component == "generator"


# ---------------------------------------------------------------- streaming


def test_generator_tokens_stream_out_of_the_graph(fakes):
    reply = "The bridge opened in 1937 [1]."
    model = GenericFakeChatModel(messages=iter([AIMessage(reply)]))
    graph = build_graph({}, retrievers=one_doc_retrievers(fakes), generator_model=model)
    chunks, final = [], None
    for mode, item in graph.stream({"query": QUESTION}, stream_mode=["messages", "values"]):
        if mode == "messages":
            chunks.append(item)
        else:
            final = item
    assert len(chunks) > 3
    assert all(isinstance(c, AIMessageChunk) for c, _ in chunks)
    assert {meta["langgraph_node"] for _, meta in chunks} == {"generate"}
    assert "".join(c.content for c, _ in chunks) == reply == final["answer"]


async def test_generator_tokens_stream_out_of_the_graph_async(fakes):
    model = GenericFakeChatModel(messages=iter([AIMessage("Opened in 1937 [1].")]))
    graph = build_graph({}, retrievers=one_doc_retrievers(fakes), generator_model=model)
    pieces = [
        chunk.content
        async for chunk, meta in graph.astream({"query": QUESTION}, stream_mode="messages")
        if meta["langgraph_node"] == "generate"
    ]
    assert len(pieces) > 3 and "".join(pieces) == "Opened in 1937 [1]."


def test_extractive_generator_streams_its_answer_turn_once(fakes):
    """No tokens (no model), but the answer joins the conversation as one AI message, which a
    messages stream (Studio's chat) shows."""
    graph = build_graph({}, retrievers=one_doc_retrievers(fakes))
    streamed = list(graph.stream({"query": QUESTION}, stream_mode="messages"))
    assert len(streamed) == 1
    message, meta = streamed[0]
    assert meta["langgraph_node"] == "generate" and message.type == "ai"
    assert message.content.startswith(graph.invoke({"query": QUESTION})["answer"])
