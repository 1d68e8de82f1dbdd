"""``hybrid`` branches: the fallback is a node of the graph, and the branch record says who
served and why.

Primary and fallback are in-test retrievers here; tests/integration/test_backend_hybrid.py
runs the same paths over real backends.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fake_scorer import FakeScorer
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.hybrid.retriever import HybridRetriever
from parallel_rag.graph import build_graph
from parallel_rag.nodes.failure_policy import BlockedError
from pydantic import ConfigDict, Field

QUESTION = "What is the capital of France?"
RERANK = {"reranker": {"kind": "embedding"}}


class SleepRetriever(BaseRetriever):
    """Sleeps, then returns its documents; records when each call started."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    seconds: float = 0.0
    docs: list[Document] = Field(default_factory=list)
    started: list[float] = Field(default_factory=list)
    lock: Any = Field(default_factory=threading.Lock)

    def _get_relevant_documents(self, query, *, run_manager):
        with self.lock:
            self.started.append(time.perf_counter())
        time.sleep(self.seconds)
        return list(self.docs)


def _docs(fakes, *names: str) -> list[Document]:
    return [fakes.doc(n, f"{n} is a document about capitals.", 0.5, tenant="acme") for n in names]


def _graph(fakes, hybrid: HybridRetriever, config: dict | None = None, scorer=None):
    other = fakes.ListRetriever(docs=_docs(fakes, "other"))
    # lexical-only extractive answers: these tests never load an embedding model
    base = {"retrievers": [], "generator": {"min_similarity": None}}
    return build_graph(
        {**base, **(config or {})}, retrievers={"kb": hybrid, "lex": other}, scorer=scorer
    )


def _kb(result: dict) -> dict:
    return next(b for b in result["branches"] if b["retriever"] == "kb")


def _hybrid(primary, fallback, **kwargs) -> HybridRetriever:
    return HybridRetriever(
        primary=primary, fallback=fallback, primary_name="api", fallback_name="local", **kwargs
    )


# ---------------------------------------------------------------- the graph shows the fallback


def test_fallback_is_a_node_with_edges_in_the_compiled_graph(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.ListRetriever())
    drawn = _graph(fakes, hybrid).get_graph()
    edges = {(e.source, e.target) for e in drawn.edges}
    assert "fallback" in drawn.nodes
    assert ("retrieve", "fallback") in edges
    assert ("fallback", "fuse") in edges
    assert "fallback" in drawn.draw_mermaid()


def test_fallback_edges_lead_to_rerank_when_a_reranker_is_configured(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.ListRetriever())
    drawn = _graph(fakes, hybrid, RERANK, FakeScorer(by_length=True)).get_graph()
    edges = {(e.source, e.target) for e in drawn.edges}
    assert {("retrieve", "fallback"), ("fallback", "rerank"), ("rerank", "fuse")} <= edges


def test_no_fallback_node_without_a_hybrid_fallback(fakes, corpus):
    assert "fallback" not in build_graph({"retrievers": []}, retrievers=corpus(2)).get_graph().nodes
    primary_only = HybridRetriever(primary=fakes.ListRetriever(docs=_docs(fakes, "a")))
    assert "fallback" not in _graph(fakes, primary_only).get_graph().nodes


# ---------------------------------------------------------------- sequential


def test_sequential_primary_with_context_never_calls_the_fallback(fakes):
    fallback = fakes.FailingRetriever()
    result = _graph(fakes, _hybrid(fakes.ListRetriever(docs=_docs(fakes, "a")), fallback)).invoke(
        {"query": QUESTION}
    )
    record = _kb(result)
    assert (record["status"], record["served_by"], record["fallback_used"]) == ("ok", "api", False)
    assert record["fallback_reason"] is None
    assert fallback.calls == 0


def test_sequential_failed_primary_is_served_by_the_fallback(fakes):
    hybrid = _hybrid(
        fakes.FailingRetriever(message="503 upstream"),
        fakes.ListRetriever(docs=_docs(fakes, "local-doc")),
    )
    result = _graph(fakes, hybrid).invoke({"query": QUESTION})
    record = _kb(result)
    assert record["status"] == "ok" and record["served_by"] == "local"
    assert record["fallback_used"] is True
    assert record["fallback_reason"] == "primary failed: RuntimeError: 503 upstream"
    assert record["error"] is None and result["warnings"] == []
    kb_docs = [
        d["id"] for d in result["documents"] if any(s["retriever"] == "kb" for s in d["sources"])
    ]
    assert kb_docs == ["local-doc"]
    assert "fallback" in result["timings"]


def test_sequential_empty_primary_is_served_by_the_fallback(fakes):
    hybrid = _hybrid(fakes.ListRetriever(docs=[]), fakes.ListRetriever(docs=_docs(fakes, "f")))
    record = _kb(_graph(fakes, hybrid).invoke({"query": QUESTION}))
    assert record["served_by"] == "local" and record["hits"] == 1
    assert record["fallback_reason"] == "primary returned no results"


def test_both_failing_is_a_failed_branch_that_names_both(fakes):
    hybrid = _hybrid(
        fakes.FailingRetriever(message="p down"), fakes.FailingRetriever(message="f down")
    )
    result = _graph(fakes, hybrid).invoke({"query": QUESTION})
    record = _kb(result)
    assert record["status"] == "failed" and record["served_by"] == "local"
    assert "p down" in record["error"] and "fallback 'local' failed" in record["error"]
    assert "f down" in record["error"]
    assert any("f down" in w for w in result["warnings"])  # default on_failure: warn


def test_both_failing_under_block_stops_the_request(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.FailingRetriever(message="f down"))
    graph = _graph(fakes, hybrid, {"on_failure": "block"})
    with pytest.raises(BlockedError, match="f down"):
        graph.invoke({"query": QUESTION})


def test_a_failed_primary_does_not_block_when_the_fallback_serves(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.ListRetriever(docs=_docs(fakes, "f")))
    record = _kb(_graph(fakes, hybrid, {"on_failure": "block"}).invoke({"query": QUESTION}))
    assert record["status"] == "ok" and record["fallback_used"] is True


def test_primary_timeout_leads_to_the_fallback(fakes):
    primary = SleepRetriever(seconds=3, docs=_docs(fakes, "late"))
    hybrid = _hybrid(
        primary, fakes.ListRetriever(docs=_docs(fakes, "f")), primary_timeout_seconds=0.3
    )
    record = _kb(_graph(fakes, hybrid).invoke({"query": QUESTION}))
    assert record["served_by"] == "local"
    assert record["fallback_reason"] == "primary failed: timed out after 0.3s"


def test_fallback_receives_the_filters_and_tenant(fakes):
    fallback = fakes.FilteringRetriever(docs=_docs(fakes, "f"))
    hybrid = _hybrid(fakes.FailingRetriever(), fallback)
    result = _graph(fakes, hybrid).invoke({"query": QUESTION, "tenant": "acme"})
    assert fallback.received and fallback.received[0]["filters"] == {"tenant": "acme"}
    assert _kb(result)["served_by"] == "local"


def test_fallback_results_are_reranked(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.ListRetriever(docs=_docs(fakes, "f", "g")))
    result = _graph(fakes, hybrid, RERANK, FakeScorer(by_length=True)).invoke({"query": QUESTION})
    assert _kb(result)["served_by"] == "local" and _kb(result)["rerank_ms"] is not None
    sources = [s for d in result["documents"] for s in d["sources"] if s["retriever"] == "kb"]
    assert sources and all("rerank_score" in s for s in sources)


async def test_sequential_fallback_on_the_async_path(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.ListRetriever(docs=_docs(fakes, "f")))
    record = _kb(await _graph(fakes, hybrid).ainvoke({"query": QUESTION}))
    assert record["served_by"] == "local" and record["fallback_used"] is True


# ---------------------------------------------------------------- parallel


def test_parallel_starts_both_and_uses_a_slow_primary_with_context(fakes):
    primary = SleepRetriever(seconds=0.4, docs=_docs(fakes, "p"))
    fallback = SleepRetriever(seconds=0.0, docs=_docs(fakes, "f"))
    hybrid = _hybrid(primary, fallback, strategy="parallel")
    result = _graph(fakes, hybrid).invoke({"query": QUESTION})
    record = _kb(result)
    assert (record["served_by"], record["fallback_used"]) == ("api", False)
    assert fallback.started, "parallel strategy must start the fallback too"
    assert abs(fallback.started[0] - primary.started[0]) < 0.3  # both started at once
    ids = {d["id"] for d in result["documents"]}
    assert "p" in ids and "f" not in ids  # the two results are never merged


@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
def test_parallel_saves_the_fallback_time_after_a_primary_timeout(fakes, strategy):
    primary = SleepRetriever(seconds=5, docs=_docs(fakes, "late"))
    fallback = SleepRetriever(seconds=0.7, docs=_docs(fakes, "f"))
    hybrid = _hybrid(primary, fallback, strategy=strategy, primary_timeout_seconds=0.7)
    record = _kb(_graph(fakes, hybrid).invoke({"query": QUESTION}))
    elapsed = record["latency_ms"] / 1000  # the branch's own time, primary and fallback
    assert record["served_by"] == "local"
    assert record["fallback_reason"] == "primary failed: timed out after 0.7s"
    if strategy == "parallel":
        assert elapsed < 1.3, elapsed  # fallback ran during the primary's wait
    else:
        assert elapsed >= 1.4, elapsed  # fallback only after the primary gave up


def test_parallel_failed_primary_and_empty_primary(fakes):
    failed = _hybrid(
        fakes.FailingRetriever(), fakes.ListRetriever(docs=_docs(fakes, "f")), strategy="parallel"
    )
    record = _kb(_graph(fakes, failed).invoke({"query": QUESTION}))
    assert record["served_by"] == "local" and record["fallback_reason"].startswith("primary failed")
    empty = _hybrid(
        fakes.ListRetriever(docs=[]),
        fakes.ListRetriever(docs=_docs(fakes, "f")),
        strategy="parallel",
    )
    record = _kb(_graph(fakes, empty).invoke({"query": QUESTION}))
    assert record["served_by"] == "local"
    assert record["fallback_reason"] == "primary returned no results"


async def test_parallel_on_the_async_path(fakes):
    primary = SleepRetriever(seconds=5, docs=_docs(fakes, "late"))
    fallback = SleepRetriever(seconds=0.2, docs=_docs(fakes, "f"))
    hybrid = _hybrid(primary, fallback, strategy="parallel", primary_timeout_seconds=0.5)
    record = _kb(await _graph(fakes, hybrid).ainvoke({"query": QUESTION}))
    assert record["served_by"] == "local"
    assert record["latency_ms"] < 1200
    assert abs(fallback.started[0] - primary.started[0]) < 0.3


# ---------------------------------------------------------------- standalone retriever


def test_hybrid_retriever_alone_runs_the_same_strategy(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(), fakes.ListRetriever(docs=_docs(fakes, "f")))
    assert [d.id for d in hybrid.invoke(QUESTION)] == ["f"]
    outcome = hybrid.search(QUESTION)
    assert (outcome.served_by, outcome.fallback_used) == ("local", True)
    assert outcome.fallback_reason.startswith("primary failed: RuntimeError")


def test_hybrid_retriever_alone_raises_when_nothing_can_serve(fakes):
    hybrid = _hybrid(fakes.FailingRetriever(message="p"), fakes.FailingRetriever(message="f"))
    with pytest.raises(RuntimeError, match="fallback 'local' failed"):
        hybrid.invoke(QUESTION)


def test_hybrid_kind_follows_its_primary(fakes):
    assert _hybrid(fakes.DenseListRetriever(), fakes.ListRetriever()).retrieval_kind == "dense"
    assert _hybrid(fakes.ListRetriever(), fakes.DenseListRetriever()).retrieval_kind == "lexical"
