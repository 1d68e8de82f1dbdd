"""``reranker.kind: llm`` on a real model: SmolLM2-135M-Instruct behind llama.cpp's
OpenAI-compatible server ranks each branch's candidates listwise.

The model is tiny, so the test asserts the contract, not its judgement: every branch is
reranked by one call (or follows ``on_failure`` with a warning naming the reply), rerank
scores are the positions of a permutation, ids and retrieval scores are untouched, and the
branch records its rerank latency. ``bench/rerank.py --scorers llm`` measures its quality.
"""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.base import SCORE_KEY
from parallel_rag.graph.builder import build_graph

pytestmark = pytest.mark.integration

PASSAGES = {
    "paris": "Paris is the capital and largest city of France.",
    "forth": "The Forth Bridge is a railway bridge across the Firth of Forth in Scotland.",
    "arrol": "Sir William Arrol's company built the Forth Bridge, which opened in 1890.",
    "bananas": "Bananas are a good source of potassium.",
    "tower": "The Eiffel Tower was completed in 1889 for the World's Fair.",
}


class Passages(BaseRetriever):
    """The passages in a fixed order with descending retrieval scores."""

    order: list[str]

    def _get_relevant_documents(self, query, *, run_manager):
        return [
            Document(
                id=doc_id,
                page_content=PASSAGES[doc_id],
                metadata={"source": f"{doc_id}.md", SCORE_KEY: 1.0 - i / 10},
            )
            for i, doc_id in enumerate(self.order)
        ]


def test_smollm2_reranks_each_branch_listwise(llm_settings):
    orders = {
        "lexical": ["paris", "bananas", "forth", "tower", "arrol"],
        "dense": ["tower", "arrol", "paris", "forth", "bananas"],
    }
    graph = build_graph(
        {
            "reranker": {
                "kind": "llm",
                "llm": {**llm_settings, "max_tokens": 40},
                "on_failure": "warn",
            }
        },
        retrievers={name: Passages(order=order) for name, order in orders.items()},
    )
    result = graph.invoke({"query": "Who built the Forth Bridge?", "top_k": 5})
    failed = [w for w in result["warnings"] if "reranker failed" in w]
    print("warnings:", failed)
    assert len(failed) < 2, "SmolLM2 produced no usable ranking on either branch"
    for branch in result["branches"]:
        assert branch["status"] == "ok" and branch["rerank_ms"] > 0
    by_branch: dict[str, dict[str, float]] = {}
    for document in result["documents"]:
        for source in document["sources"]:
            assert source["score"] == pytest.approx(
                1.0 - orders[source["retriever"]].index(document["id"]) / 10
            )  # retrieval scores untouched
            if "rerank_score" in source:
                by_branch.setdefault(source["retriever"], {})[document["id"]] = source[
                    "rerank_score"
                ]
    assert by_branch, "no branch carries rerank scores"
    for retriever, scores in by_branch.items():
        assert sorted(scores.values()) == [1.0, 2.0, 3.0, 4.0, 5.0], retriever
        ranked = sorted(scores, key=lambda doc_id: -scores[doc_id])
        branch = next(b for b in result["branches"] if b["retriever"] == retriever)
        print(retriever, "retrieval:", orders[retriever], "-> SmolLM2:", ranked, branch)
