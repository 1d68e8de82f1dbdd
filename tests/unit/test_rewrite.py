"""Query rewriting (fan-out and views): output parsing, view assembly, failure policy."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.graph import build_graph
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.nodes import prompts
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.rewrite.node import RewriteNode, assemble_views
from parallel_rag.nodes.rewrite.rewriters import (
    MAX_HYDE_CHARS,
    MAX_VIEW_CHARS,
    ChatModelRewriter,
    EmptyRewriteError,
    PseudoRelevanceRewriter,
    parse_query_lines,
)
from pydantic import ValidationError

QUESTION = "How do vaccines train the immune system?"


def parse(text: str, limit: int = 10) -> list[str]:
    return parse_query_lines(text, original=QUESTION, limit=limit)


# ---------------------------------------------------------------- parse_query_lines


def test_plain_lines():
    assert parse("vaccine immune memory\nhow immunisation works") == [
        "vaccine immune memory",
        "how immunisation works",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "1. antibody response to vaccines",
        "2) antibody response to vaccines",
        "3: antibody response to vaccines",
        "10. antibody response to vaccines",
        "a) antibody response to vaccines",
        "B. antibody response to vaccines",
        "- antibody response to vaccines",
        "* antibody response to vaccines",
        "\u2022 antibody response to vaccines",
        "> antibody response to vaccines",
        "Query 1: antibody response to vaccines",
        "Q2. antibody response to vaccines",
        "Question 3) antibody response to vaccines",
        "question: antibody response to vaccines",
        '"antibody response to vaccines"',
        "'antibody response to vaccines'",
        "`antibody response to vaccines`",
        '1. "antibody response to vaccines"',
        "   4.   antibody response to vaccines   ",
    ],
)
def test_markers_and_quotes_are_stripped(line):
    assert parse(line) == ["antibody response to vaccines"]


@pytest.mark.parametrize(
    "line",
    [
        "U.S. vaccine schedule for children",
        "3.5 million doses shipped",
        "2:00 pm vaccination clinic hours",
        "Q-learning for vaccine logistics",
        "A.I. models of immune response",
    ],
)
def test_text_that_only_looks_like_a_marker_is_kept(line):
    assert parse(line) == [line]


def test_blank_lines_and_headers_are_skipped():
    text = "Here are 3 rephrasings:\n\n\n1. memory B cells\n   \n2. adaptive immunity\n"
    assert parse(text) == ["memory B cells", "adaptive immunity"]


def test_echoes_of_the_question_are_dropped():
    text = f'{QUESTION}\n1. {QUESTION.upper()}\n  {QUESTION}  \n"{QUESTION}"\nother view'
    assert parse(text) == ["other view"]


def test_duplicates_are_dropped_case_insensitively():
    text = "Immune memory\n- immune memory\n2. IMMUNE MEMORY\nT cells"
    assert parse(text) == ["Immune memory", "T cells"]


def test_overlong_lines_are_cut():
    (query,) = parse("x" * (MAX_VIEW_CHARS + 300))
    assert query == "x" * MAX_VIEW_CHARS


def test_limit_is_respected():
    text = "\n".join(f"{i}. query number {i}" for i in range(1, 8))
    assert parse(text, limit=3) == ["query number 1", "query number 2", "query number 3"]


def test_nothing_usable():
    assert parse("") == []
    assert parse("\n \n1.\n- \n" + QUESTION) == []


# ---------------------------------------------------------------- ChatModelRewriter


def test_multi_query_prompt_and_parse(fakes):
    model = fakes.RecordingChatModel(responses=["1. memory cells\n2. antibodies\n3. T cells"])
    rewriter = ChatModelRewriter(model, kind="multi_query", num_queries=2)
    assert rewriter.rewrite(QUESTION) == [("memory cells", "rewrite"), ("antibodies", "rewrite")]
    ((message,),) = model.calls
    assert message.content == prompts.MULTI_QUERY_PROMPT.format(query=QUESTION, num_queries=2)


def test_decompose_uses_its_prompt(fakes):
    model = fakes.RecordingChatModel(responses=["What is an antigen?\nWhat are B cells?"])
    rewriter = ChatModelRewriter(model, kind="decompose", num_queries=3)
    assert rewriter.rewrite(QUESTION) == [
        ("What is an antigen?", "rewrite"),
        ("What are B cells?", "rewrite"),
    ]
    assert model.calls[0][0].content == prompts.DECOMPOSE_PROMPT.format(
        query=QUESTION, num_queries=3
    )


def test_hyde_returns_one_passage(fakes):
    passage = "Vaccines expose the body to an antigen.\n\nMemory cells then remember it."
    model = fakes.RecordingChatModel(responses=[f"  {passage}  "])
    rewriter = ChatModelRewriter(model, kind="hyde")
    assert rewriter.rewrite(QUESTION) == [(passage, "hyde")]
    assert model.calls[0][0].content == prompts.HYDE_PROMPT.format(query=QUESTION, num_queries=3)


def test_hyde_passage_is_bounded(fakes):
    rewriter = ChatModelRewriter(fakes.StaticChatModel(text="y" * 5000), kind="hyde")
    ((passage, kind),) = rewriter.rewrite(QUESTION)
    assert kind == "hyde" and len(passage) == MAX_HYDE_CHARS


@pytest.mark.parametrize("kind", ["multi_query", "decompose", "hyde"])
def test_empty_output_raises(fakes, kind):
    with pytest.raises(EmptyRewriteError):
        ChatModelRewriter(fakes.StaticChatModel(text="  \n "), kind=kind).rewrite(QUESTION)


def test_only_echoes_is_empty_output(fakes):
    with pytest.raises(EmptyRewriteError):
        ChatModelRewriter(fakes.StaticChatModel(text=f"1. {QUESTION}")).rewrite(QUESTION)


def test_custom_prompt_and_bound_settings(fakes):
    model = fakes.RecordingChatModel(responses=["one view"])
    rewriter = ChatModelRewriter(
        model, prompt="Rewrite {query} into {num_queries}", temperature=0.2, max_tokens=64
    )
    assert rewriter.runnable.kwargs == {"temperature": 0.2, "max_tokens": 64}
    assert rewriter.rewrite("q?") == [("one view", "rewrite")]
    assert model.calls[0][0].content == "Rewrite q? into 3"


async def test_async_rewrite(fakes):
    model = GenericFakeChatModel(messages=iter([AIMessage("- alpha\n- beta")]))
    assert await asyncio.to_thread(ChatModelRewriter(model).rewrite, QUESTION) == [
        ("alpha", "rewrite"),
        ("beta", "rewrite"),
    ]


# ---------------------------------------------------------------- views


def test_views_keep_original_first_and_deduplicate_on_stripped_text():
    views = assemble_views(
        "  the question ",
        [("the question", "rewrite"), (" alt ", "rewrite"), ("alt", "rewrite"), ("", "rewrite")],
        include_original=True,
    )
    assert views == [
        {"index": 0, "text": "the question", "kind": "original"},
        {"index": 1, "text": "alt", "kind": "rewrite"},
    ]


def test_views_are_case_sensitive_exact_text():
    views = assemble_views("q", [("Alt", "rewrite"), ("alt", "rewrite")], include_original=True)
    assert [v["text"] for v in views] == ["q", "Alt", "alt"]


def test_views_without_original():
    views = assemble_views("q", [("a", "rewrite"), ("b", "rewrite")], include_original=False)
    assert views == [
        {"index": 0, "text": "a", "kind": "rewrite"},
        {"index": 1, "text": "b", "kind": "rewrite"},
    ]


class ScriptedRewriter:
    def __init__(self, output=None, error=None):
        self.output, self.error = output, error

    def rewrite(self, query, config=None):
        if self.error:
            raise self.error
        return self.output


@pytest.mark.parametrize(
    "rewriter",
    [
        ScriptedRewriter(error=EmptyRewriteError("no usable query")),
        ScriptedRewriter(error=RuntimeError("model offline")),
        ScriptedRewriter(output=[]),
        ScriptedRewriter(output=[("   ", "rewrite")]),
    ],
)
@pytest.mark.parametrize("include_original", [True, False])
def test_rewrite_node_failure_policy(rewriter, include_original):
    state = {"query": " q "}
    keep = {"include_original": include_original}
    skip = RewriteNode(rewriter, **keep, on_failure="skip").invoke(state, {})
    assert skip["views"] == [{"index": 0, "text": "q", "kind": "original"}]
    assert skip["warnings"] == []
    warn = RewriteNode(rewriter, **keep, on_failure="warn").invoke(state, {})
    assert warn["views"] == skip["views"]
    (warning,) = warn["warnings"]
    assert "rewriter" in warning and "original query" in warning
    with pytest.raises(BlockedError) as caught:
        RewriteNode(rewriter, **keep, on_failure="block").invoke(state, {})
    assert caught.value.component == "rewriter"


async def test_rewrite_node_async_failure_policy():
    node = RewriteNode(ScriptedRewriter(output=[]), include_original=True, on_failure="warn")
    update = await asyncio.to_thread(node.invoke, {"query": "q"}, {})
    assert update["views"] == [{"index": 0, "text": "q", "kind": "original"}]
    assert len(update["warnings"]) == 1 and "rewrite" in update["timings"]


# ---------------------------------------------------------------- through the graph


def two_retrievers(fakes):
    doc = fakes.doc("v", "Vaccines train the immune system with antigens.", 1.0)
    return {"a": fakes.ListRetriever(docs=[doc]), "b": fakes.ListRetriever(docs=[doc])}


def test_rewriter_model_fills_the_rewriter_slot(fakes):
    retrievers = two_retrievers(fakes)
    model = GenericFakeChatModel(
        messages=iter([AIMessage("1. vaccine immune training\n2. how vaccines work")])
    )
    result = build_graph({}, retrievers=retrievers, rewriter_model=model).invoke(
        {"query": QUESTION}
    )
    assert result["queries"] == [
        {"text": QUESTION, "kind": "original"},
        {"text": "vaccine immune training", "kind": "rewrite"},
        {"text": "how vaccines work", "kind": "rewrite"},
    ]
    assert len(result["branches"]) == 6
    for retriever in retrievers.values():
        assert sorted(retriever.queries) == sorted(q["text"] for q in result["queries"])
    # the same document from 6 branches is one document with 6 sources
    (doc,) = result["documents"]
    assert len(doc["sources"]) == 6
    assert {s["view_kind"] for s in doc["sources"]} == {"original", "rewrite"}


def test_num_queries_from_config(fakes):
    model = fakes.StaticChatModel(text="one\ntwo\nthree\nfour")
    graph = build_graph(
        {"rewriter": {"num_queries": 2}}, retrievers=two_retrievers(fakes), rewriter_model=model
    )
    assert [q["text"] for q in graph.invoke({"query": QUESTION})["queries"]] == [
        QUESTION,
        "one",
        "two",
    ]


def test_decompose_views_through_the_graph(fakes):
    model = fakes.StaticChatModel(text="What is an antigen?\nWhat do B cells do?")
    graph = build_graph(
        {"rewriter": {"kind": "decompose"}}, retrievers=two_retrievers(fakes), rewriter_model=model
    )
    result = graph.invoke({"query": QUESTION})
    assert [q["kind"] for q in result["queries"]] == ["original", "rewrite", "rewrite"]


def test_include_original_false(fakes):
    retrievers = two_retrievers(fakes)
    model = fakes.StaticChatModel(text="vaccine training\nimmune memory")
    graph = build_graph(
        {"rewriter": {"include_original": False}}, retrievers=retrievers, rewriter_model=model
    )
    result = graph.invoke({"query": QUESTION})
    assert result["queries"] == [
        {"text": "vaccine training", "kind": "rewrite"},
        {"text": "immune memory", "kind": "rewrite"},
    ]
    assert len(result["branches"]) == 4
    assert all(QUESTION not in r.queries for r in retrievers.values())


def test_duplicate_rewrites_collapse_into_one_view(fakes):
    model = fakes.StaticChatModel(text=f"{QUESTION}\nsame view\nsame view\n  same view  ")
    graph = build_graph({}, retrievers=two_retrievers(fakes), rewriter_model=model)
    result = graph.invoke({"query": QUESTION})
    assert [q["text"] for q in result["queries"]] == [QUESTION, "same view"]
    assert len(result["branches"]) == 4


@pytest.mark.parametrize("output", ["", "   \n\n", f"1. {QUESTION}"])
def test_empty_rewriter_output_under_skip_falls_back_to_the_original(fakes, output):
    retrievers = two_retrievers(fakes)
    graph = build_graph(
        {"rewriter": {"on_failure": "skip"}},
        retrievers=retrievers,
        rewriter_model=fakes.StaticChatModel(text=output),
    )
    result = graph.invoke({"query": QUESTION})
    assert result["queries"] == [{"text": QUESTION, "kind": "original"}]
    assert result["warnings"] == []
    assert len(result["branches"]) == 2
    assert all(r.queries == [QUESTION] for r in retrievers.values())


def test_empty_rewriter_output_under_warn_warns(fakes):
    graph = build_graph(
        {"rewriter": {"on_failure": "warn", "include_original": False}},
        retrievers=two_retrievers(fakes),
        rewriter_model=fakes.StaticChatModel(text=""),
    )
    result = graph.invoke({"query": QUESTION})
    assert result["queries"] == [{"text": QUESTION, "kind": "original"}]
    (warning,) = result["warnings"]
    assert "rewriter" in warning
    assert result["documents"]  # the request still answers


def test_empty_rewriter_output_under_block_raises(fakes):
    graph = build_graph(
        {"rewriter": {"on_failure": "block"}},
        retrievers=two_retrievers(fakes),
        rewriter_model=fakes.StaticChatModel(text=""),
    )
    with pytest.raises(BlockedError, match="rewriter"):
        graph.invoke({"query": QUESTION})


async def test_empty_rewriter_output_under_block_raises_async(fakes):
    graph = build_graph(
        {"rewriter": {"on_failure": "block"}},
        retrievers=two_retrievers(fakes),
        rewriter_model=fakes.StaticChatModel(text=""),
    )
    with pytest.raises(BlockedError, match="rewriter"):
        await graph.ainvoke({"query": QUESTION})


def test_rewriter_policy_defaults_to_the_pipeline_policy(fakes):
    graph = build_graph(
        {"on_failure": "block"},
        retrievers=two_retrievers(fakes),
        rewriter_model=fakes.StaticChatModel(text=""),
    )
    with pytest.raises(BlockedError, match="rewriter"):
        graph.invoke({"query": QUESTION})


def test_raising_rewriter_model_under_warn(fakes):
    graph = build_graph(
        {}, retrievers=two_retrievers(fakes), rewriter_model=fakes.ExplodingChatModel()
    )
    result = graph.invoke({"query": QUESTION})
    assert result["queries"] == [{"text": QUESTION, "kind": "original"}]
    (warning,) = result["warnings"]
    assert "must not be called" in warning


# ---------------------------------------------------------------- prf (no model)

PRF_DOCS = [
    ("flu", "Influenza vaccines train the immune system with inactivated virus antigens.", {}),
    ("mmr", "The measles vaccine trains immune memory; antibodies and antigens persist.", {}),
    ("cells", "Memory B cells make antibodies after vaccination against antigens.", {}),
    ("bread", "Knead the bread dough and let it rise in a warm oven.", {}),
    ("pasta", "Boil the pasta in salted water and drain it al dente.", {}),
]


def prf_index():
    return BM25Index.from_chunks(PRF_DOCS)


def test_prf_expands_from_the_top_documents():
    index = prf_index()
    rewriter = PseudoRelevanceRewriter(lambda: index, fb_docs=3, fb_terms=4)
    terms = rewriter.expansion_terms("How do vaccines train the immune system?")
    assert len(terms) == 4
    assert [w for _, w in terms] == sorted((w for _, w in terms), reverse=True)
    original = set(index.query_terms("How do vaccines train the immune system?"))
    assert not original & {t for t, _ in terms}
    assert "antigen" in {t for t, _ in terms}  # in all three feedback documents
    assert not {"bread", "pasta", "dough"} & {t for t, _ in terms}
    ((text, kind),) = rewriter.rewrite("How do vaccines train the immune system?")
    assert kind == "expansion"
    assert text.startswith("How do vaccines train the immune system? ")
    assert text.split()[-4:] == [t for t, _ in terms]


def test_prf_with_no_matching_term_is_an_empty_rewrite():
    index = prf_index()
    with pytest.raises(EmptyRewriteError):
        PseudoRelevanceRewriter(lambda: index).rewrite("quantum chromodynamics")


def test_prf_needs_no_model_and_reaches_lexical_branches_only(tmp_path, fakes):
    prf_index().save(tmp_path / "bm25")
    dense = fakes.DenseListRetriever(docs=[fakes.doc("flu", PRF_DOCS[0][1], 1.0)])
    graph = build_graph(
        {
            "retrievers": [
                {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "bm25"}}
            ],
            "rewriter": {"kind": "prf", "fb_docs": 2, "fb_terms": 3},
        },
        retrievers={"dense": dense},
        base_dir=tmp_path,
    )
    result = graph.invoke({"query": QUESTION})
    kinds = [q["kind"] for q in result["queries"]]
    assert kinds == ["original", "expansion"]
    assert dense.queries == [QUESTION]
    views = {(b["retriever"], b["view_kind"]) for b in result["branches"]}
    assert views == {("lexical", "original"), ("lexical", "expansion"), ("dense", "original")}


def test_prf_needs_a_bm25_retriever():
    with pytest.raises(ValidationError, match="rewriter.kind"):
        PipelineConfig.model_validate(
            {
                "retrievers": [
                    {"name": "a", "backend": "qdrant"},
                    {"name": "b", "backend": "qdrant"},
                ],
                "rewriter": {"kind": "prf"},
            }
        )
