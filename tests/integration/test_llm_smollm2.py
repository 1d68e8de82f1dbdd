"""Rewriting and grounded generation against a real LLM (issue 4): SmolLM2-135M-Instruct behind
llama-cpp-python's OpenAI-compatible server on 127.0.0.1, reached through ``ChatOpenAI`` exactly
as a vLLM/Ollama endpoint would be, with the example corpus in real BM25 and Qdrant indexes.

The model is tiny: these tests assert structure (views parsed, HyDE kept to dense branches and
out of the evidence, citations valid or dropped with a warning, tokens streamed, the tool-role
history accepted over HTTP), never wisdom.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from langchain_core.documents import Document
from langchain_core.messages import AIMessageChunk
from langchain_core.retrievers import BaseRetriever
from parallel_rag.graph import build_graph
from parallel_rag.nodes.chat_models import ChatModelSettings, make_chat_model
from parallel_rag.nodes.generate.citations import check_citations, cited_numbers

pytestmark = pytest.mark.integration

QUESTION = "How did the Tacoma Narrows Bridge collapse and how is the Millau Viaduct different?"
GENERATOR_LLM = {"max_tokens": 64}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def pipeline(example_index, **sections) -> tuple[dict, object]:
    config, base_dir, _ = example_index
    return {**config.model_dump(exclude_unset=True), **sections}, base_dir


def assert_citations_checked(result: dict, raw: str | None = None) -> None:
    """Every citation names a document given to the generator; invalid ones never survive."""
    documents = result["documents"]
    for citation in result["citations"]:
        assert 1 <= citation["number"] <= len(documents)
        assert citation["id"] == documents[citation["number"] - 1]["id"]
    valid, invalid = cited_numbers(result["answer"], len(documents))
    assert invalid == []
    assert [c["number"] for c in result["citations"]] == valid
    if raw is not None:
        raw_invalid = cited_numbers(raw, len(documents))[1]
        if raw_invalid:
            (warning,) = [w for w in result["warnings"] if "does not exist" in w]
            assert all(str(n) in warning for n in raw_invalid)
    assert not [w for w in result["warnings"] if w.startswith("generator failed")]


def test_max_tokens_reaches_the_server(llm_settings):
    """langchain-openai would send ``max_completion_tokens``, which this server ignores."""
    model = make_chat_model(ChatModelSettings(**{**llm_settings, "max_tokens": 5}))
    reply = model.invoke("Count from one to one hundred, in words.")
    assert 0 < reply.usage_metadata["output_tokens"] <= 5


@pytest.mark.parametrize("kind", ["multi_query", "decompose"])
def test_list_rewriters_end_to_end(example_index, llm_settings, kind):
    config, base_dir = pipeline(
        example_index,
        rewriter={"kind": kind, "num_queries": 3, "max_tokens": 80, "llm": llm_settings},
    )
    result = build_graph(config, base_dir=base_dir).invoke({"query": QUESTION})
    assert not [w for w in result["warnings"] if "rewriter" in w], result["warnings"]
    original, *rewrites = result["queries"]
    assert original == {"text": QUESTION, "kind": "original"}
    assert 1 <= len(rewrites) <= 3
    assert {q["kind"] for q in rewrites} == {"rewrite"}
    texts = [q["text"] for q in result["queries"]]
    assert len(set(texts)) == len(texts) and all(t.strip() == t and t for t in texts)
    assert all(len(t) <= 500 and "\n" not in t for t in texts)
    # every view went to every retriever
    pairs = {(b["view"], b["retriever"]) for b in result["branches"]}
    assert pairs == {(t, r) for t in texts for r in ("lexical", "dense")}
    assert result["documents"] and result["timings"]["rewrite"] > 0


def test_hyde_end_to_end(example_index, llm_settings):
    config, base_dir = pipeline(
        example_index,
        rewriter={"kind": "hyde", "max_tokens": 120, "llm": llm_settings},
    )
    result = build_graph(config, base_dir=base_dir).invoke({"query": QUESTION})
    assert [q["kind"] for q in result["queries"]] == ["original", "hyde"]
    passage = result["queries"][1]["text"]
    assert passage and passage != QUESTION and len(passage) <= 2000
    hyde_branches = [b for b in result["branches"] if b["view_kind"] == "hyde"]
    assert [b["retriever"] for b in hyde_branches] == ["dense"]  # never the lexical branch
    assert len(result["branches"]) == 3
    # the hypothetical passage is a query, never evidence
    assert all(passage not in doc["content"] for doc in result["documents"])
    assert passage not in result["answer"]
    for doc in result["documents"]:
        for source in doc["sources"]:
            if source["view_kind"] == "hyde":
                assert source["retriever"] == "dense"


def test_tool_role_generator_streams_tokens_out_of_the_graph(example_index, llm_settings):
    config, base_dir = pipeline(
        example_index,
        generator={
            "kind": "llm",
            "injection_mode": "tool_role",
            "max_context_length": 2000,
            "llm": {**llm_settings, **GENERATOR_LLM},
        },
    )
    graph = build_graph(config, base_dir=base_dir)
    chunks, result = [], None
    for mode, item in graph.stream(
        {"query": "When did the Tacoma Narrows Bridge collapse?", "top_k": 3},
        stream_mode=["messages", "values"],
    ):
        if mode == "messages":
            chunks.append(item)
        else:
            result = item
    generated = [(c, meta) for c, meta in chunks if meta.get("langgraph_node") == "generate"]
    assert len(generated) >= 3, chunks
    assert all(isinstance(c, AIMessageChunk) for c, _ in generated)
    raw = "".join(c.content for c, _ in generated)
    assert raw.strip(), "the model streamed no text"
    assert result["answer"] == check_citations(raw, len(result["documents"])).answer
    assert_citations_checked(result, raw)


async def test_system_prompt_generator_end_to_end(example_index, llm_settings):
    config, base_dir = pipeline(
        example_index,
        generator={
            "kind": "llm",
            "injection_mode": "system_prompt",
            "max_context_length": 2000,
            "llm": {**llm_settings, **GENERATOR_LLM},
        },
    )
    graph = build_graph(config, base_dir=base_dir)
    result = await graph.ainvoke({"query": "Who designed the Millau Viaduct?", "top_k": 3})
    assert result["answer"].strip() and len(result["documents"]) == 3
    assert_citations_checked(result)


class OneDocument(BaseRetriever):
    """One fixed passage: the model can only cite [1]."""

    def _get_relevant_documents(self, query, *, run_manager):
        return [
            Document(
                id="gg",
                page_content="The Golden Gate Bridge opened in 1937 in San Francisco.",
                metadata={"source": "golden-gate-bridge.md"},
            )
        ]


def test_invented_citations_are_dropped_with_a_warning(llm_settings):
    """Asked to write "[9]" with one evidence block, SmolLM2 invents further blocks ([2], [4]):
    none of them may reach the result as a citation."""
    dropped = []
    for mode in ("system_prompt", "tool_role"):
        graph = build_graph(
            {
                "generator": {
                    "kind": "llm",
                    "injection_mode": mode,
                    "llm": {**llm_settings, "max_tokens": 40},
                }
            },
            retrievers={"a": OneDocument(), "b": OneDocument()},
        )
        chunks, result = [], None
        for stream_mode, item in graph.stream(
            {"query": "Write the text [9] and nothing else."}, stream_mode=["messages", "values"]
        ):
            if stream_mode == "messages":
                chunks.append(item[0].content)
            else:
                result = item
        raw = "".join(chunks)
        assert_citations_checked(result, raw)
        assert all(c["number"] == 1 for c in result["citations"])
        dropped.extend(cited_numbers(raw, 1)[1])
    # SmolLM2 at temperature 0 invents [2]/[4] here; whether it does on other hardware is the
    # model's business, so the rule above (only valid numbers survive) is what is asserted.
    print(f"invalid citations dropped: {dropped}")


def test_ask_with_llm_url_from_the_command_line(tmp_path, llm_server):
    """``parallel-rag ask --llm URL`` end to end: ingest, rewrite, retrieve, generate."""
    config = {
        "retrievers": [
            {"name": "bm25s", "backend": "bm25", "backend_config": {"index_path": "idx/a"}},
            {
                "name": "rank_bm25",
                "backend": "bm25",
                "backend_config": {"index_path": "idx/b", "engine": "rank_bm25"},
            },
        ],
        # --llm supplies the endpoint and model; the rest of the llm block is kept
        "generator": {"llm": {"model": "replaced", "temperature": 0, "max_tokens": 64}},
        "rewriter": {"max_tokens": 64},
    }
    (tmp_path / "parallel-rag.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PARALLEL_RAG_CONFIG": ""}
    cli = [sys.executable, "-m", "parallel_rag.studio.cli", "--config", "parallel-rag.yaml"]
    ingest = subprocess.run(
        [*cli, "ingest", str(EXAMPLES / "corpus"), "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ingest.returncode == 0, ingest.stderr
    ask = subprocess.run(
        [
            *cli,
            "ask",
            "What did Sir William Arrol build?",
            "--llm",
            llm_server.removesuffix("/v1"),  # the CLI adds /v1 and asks the server for the model
            "--rewriter",
            "multi_query",
            "--top-k",
            "3",
            "--json",
            "--no-progress",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    assert result["answer"].strip() and len(result["documents"]) == 3
    assert result["queries"][0] == {"text": "What did Sir William Arrol build?", "kind": "original"}
    if len(result["queries"]) == 1:  # SmolLM2 only echoed the question: recorded, not lost
        assert any(w.startswith("rewriter failed") for w in result["warnings"])
    else:
        assert {q["kind"] for q in result["queries"][1:]} == {"rewrite"}
    assert_citations_checked(result)
