"""The compiled graph end to end with in-test retrievers: its contracts and semantics.

Covers structure and I/O schemas, request validation, fan-out counts, HyDE routing,
concurrency (without timing), failure policies, timeouts, filters and tenants, reranking.
"""

from __future__ import annotations

import asyncio
import math
import threading

import pytest
from fake_scorer import FakeScorer
from parallel_rag.graph import RAGRequest
from parallel_rag.graph.errors import problems
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.prompts import INSUFFICIENT_EVIDENCE
from parallel_rag.nodes.retrieve import RetrievalBranch, RetrieveNode, RetrieveTask
from pydantic import ValidationError
from small_graphs import graph_of

OUTPUT_KEYS = {
    "messages",
    "answer",
    "resolution",
    "documents",
    "fusion",
    "queries",
    "citations",
    "branches",
    "warnings",
    "timings",
}
QUESTION = "What is the capital of France?"


def statuses(result) -> dict[str, str]:
    return {b["branch"]: b["status"] for b in result["branches"]}


# ---------------------------------------------------------------- structure and schemas


def test_nodes_without_rewriter_or_reranker(corpus):
    nodes = set(graph_of(corpus(2)).get_graph().nodes)
    assert nodes == {"__start__", "contextualize", "retrieve", "fuse", "generate", "__end__"}


def test_rewrite_node_only_when_a_rewriter_is_configured(corpus, fakes):
    graph = graph_of(corpus(2), rewriter_model=fakes.StaticChatModel(text="other words"))
    assert set(graph.get_graph().nodes) == {
        "__start__",
        "contextualize",
        "rewrite",
        "retrieve",
        "fuse",
        "generate",
        "__end__",
    }


def test_rerank_node_only_when_a_reranker_is_configured(corpus, fakes):
    graph = graph_of(
        corpus(2),
        {"reranker": {"kind": "embedding"}},
        rewriter_model=fakes.StaticChatModel(text="other words"),
        scorer=FakeScorer(),
    )
    assert set(graph.get_graph().nodes) == {
        "__start__",
        "contextualize",
        "rewrite",
        "retrieve",
        "rerank",
        "fuse",
        "generate",
        "__end__",
    }


def test_input_and_output_schemas_are_separate_from_state(corpus):
    graph = graph_of(corpus(2))
    assert set(graph.get_input_jsonschema()["properties"]) == {
        "query",
        "messages",
        "top_k",
        "filters",
        "tenant",
    }
    assert set(graph.get_output_jsonschema()["properties"]) == OUTPUT_KEYS


def test_output_keys_and_timings_per_node(corpus):
    result = graph_of(corpus(2)).invoke({"query": QUESTION})
    assert set(result) == OUTPUT_KEYS
    assert set(result["timings"]) == {"retrieve", "fuse", "generate"}
    assert all(isinstance(ms, float) and ms >= 0 for ms in result["timings"].values())
    assert result["queries"] == [{"text": QUESTION, "kind": "original"}]
    assert result["warnings"] == []
    assert result["answer"].startswith("Paris is the capital of France. [1]")
    assert result["citations"][0] == {"number": 1, "id": "paris", "source": "france.md"}


def test_timings_include_rewrite_and_rerank_when_they_ran(corpus, fakes):
    graph = graph_of(
        corpus(2),
        {"reranker": {"kind": "embedding"}},
        rewriter_model=fakes.StaticChatModel(text="French capital city"),
        scorer=FakeScorer(),
    )
    result = graph.invoke({"query": QUESTION})
    assert set(result) == OUTPUT_KEYS
    assert set(result["timings"]) == {"rewrite", "retrieve", "rerank", "fuse", "generate"}


def test_result_documents_have_the_contract_fields(corpus):
    result = graph_of(corpus(2)).invoke({"query": QUESTION, "top_k": 5})
    assert [d["id"] for d in result["documents"]] == ["paris", "berlin"]
    for position, doc in enumerate(result["documents"], start=1):
        assert set(doc) == {"id", "content", "metadata", "fused_score", "fused_rank", "sources"}
        assert doc["fused_rank"] == position
        assert "retrieval_score" not in doc["metadata"]  # moved into the source record
        for source in doc["sources"]:
            assert {"branch", "view", "retriever", "rank", "score"} <= set(source)
    assert [s["score"] for s in result["documents"][0]["sources"]] == [0.9, 0.9]
    for record in result["branches"]:
        assert record["status"] == "ok"
        assert record["hits"] == 2
        assert record["error"] is None
        assert record["fallback_used"] is False
        assert record["latency_ms"] >= 0


def test_request_top_k_limits_documents_and_branch_candidates(fakes):
    many = [fakes.doc(f"d{i}", f"Document number {i} text.", 1.0 - i / 100) for i in range(10)]
    retrievers = {"a": fakes.ListRetriever(docs=many), "b": fakes.ListRetriever(docs=many)}
    result = graph_of(retrievers).invoke({"query": "document text", "top_k": 2})
    assert [d["id"] for d in result["documents"]] == ["d0", "d1"]
    assert [b["hits"] for b in result["branches"]] == [4, 4]  # default: 2 x request top_k


# ---------------------------------------------------------------- request validation


@pytest.mark.parametrize(
    ("request_input", "field"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "   \n\t "}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({"query": "ok", "top_k": 0}, "top_k"),
        ({"query": "ok", "top_k": -1}, "top_k"),
        ({"query": "ok", "top_k": 10**9}, "top_k"),
        ({"query": "ok", "top_k": "5"}, "top_k"),
        ({"query": "ok", "top_k": 2.0}, "top_k"),
        ({"query": "ok", "top_k": True}, "top_k"),
        ({"query": "ok", "filters": {"a": {"b": 1}}}, "filters"),
        ({"query": "ok", "filters": {"a": [1, 2]}}, "filters"),
        ({"query": "ok", "filters": "lang=en"}, "filters"),
        ({"query": "ok", "tenant": ""}, "tenant"),
    ],
)
def test_invalid_requests_are_refused_naming_the_field(fakes, request_input, field):
    watcher = fakes.ListRetriever()
    graph = graph_of({"a": watcher, "b": fakes.ListRetriever()})
    with pytest.raises(ValidationError) as caught:
        graph.invoke(request_input)
    paths = [path for path, _ in problems(caught.value, request_input)]
    assert any(path.split(".")[0] == field for path in paths), paths
    assert watcher.queries == []  # refused before any retrieval


async def test_invalid_requests_are_refused_on_the_async_path_too(corpus):
    graph = graph_of(corpus(2))
    with pytest.raises(ValidationError, match="query"):
        await graph.ainvoke({"query": "  "})
    with pytest.raises(ValidationError, match="top_k"):
        await graph.ainvoke({"query": "ok", "top_k": 0})


def test_what_langgraph_drops_or_refuses_before_the_graph_sees_it(fakes):
    """The graph is ``StateGraph.compile()``'s own result (issue 51: no replaced START node),
    and LangGraph writes a graph's input into the state before any hook runs: it drops a key
    the input schema does not name and refuses input that is not a mapping. So an unknown key
    (or a knob sent as input) changes nothing, and a bare question is LangGraph's error; the
    surfaces that take raw requests refuse both against ``RAGRequest`` (LangServe's 422, MCP's
    tool error, the CLI), and ``RAGRequest(...)`` refuses them in Python."""
    from langgraph.errors import InvalidUpdateError

    watcher = fakes.ListRetriever()
    graph = graph_of({"a": watcher, "b": fakes.ListRetriever()})
    plain = graph.invoke({"query": "ok"})
    extra = graph.invoke({"query": "ok", "unknown": 1, "retrievers": ["a"]})
    assert extra["documents"] == plain["documents"] and extra["queries"] == plain["queries"]
    assert [b["retriever"] for b in extra["branches"]] == ["a", "b"]  # no knob from input
    with pytest.raises(InvalidUpdateError):
        graph.invoke(QUESTION)
    with pytest.raises(ValidationError, match="unknown"):
        RAGRequest.model_validate({"query": "ok", "unknown": 1})


def test_accepted_request_forms(corpus):
    graph = graph_of(corpus(2))
    for request in (
        {"query": QUESTION},
        RAGRequest(query=QUESTION, top_k=1),
        {"query": QUESTION, "top_k": 1, "filters": {"source": "france.md"}, "tenant": None},
        {"query": "q" * 4000},
    ):
        result = graph.invoke(request)
        assert set(result) == OUTPUT_KEYS
    assert len(graph.invoke(RAGRequest(query=QUESTION, top_k=1))["documents"]) == 1


# ---------------------------------------------------------------- fan-out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_branch_count_is_views_times_retrievers(fakes, corpus, n):
    rewriter = fakes.StaticChatModel(text="French capital\nCapital city of France")
    result = graph_of(corpus(n), rewriter_model=rewriter).invoke({"query": QUESTION})
    assert [q["kind"] for q in result["queries"]] == ["original", "rewrite", "rewrite"]
    expected = {f"q{v}:r{i}" for v in range(3) for i in range(n)}
    assert set(statuses(result)) == expected
    assert len(result["branches"]) == 3 * n
    # the result lists branches in (view, retriever) order
    assert [b["branch"] for b in result["branches"]] == [
        f"q{v}:r{i}" for v in range(3) for i in range(n)
    ]


def test_without_rewriter_the_original_query_is_the_only_view(corpus):
    retrievers = corpus(3)
    result = graph_of(retrievers).invoke({"query": "  " + QUESTION + "  "})
    assert result["queries"] == [{"text": QUESTION, "kind": "original"}]
    assert len(result["branches"]) == 3
    for retriever in retrievers.values():
        assert retriever.queries == [QUESTION]


def test_hyde_views_reach_dense_retrievers_only(fakes):
    passage = "HYPOTHETICAL: Lutetia was renamed and is the seat of the French state."
    lexical = fakes.ListRetriever(docs=[fakes.doc("paris", "Paris is the capital of France.", 3.0)])
    dense = fakes.DenseListRetriever(
        docs=[fakes.doc("lyon", "Lyon is a large city in France.", 0.8)]
    )
    model = fakes.RecordingChatModel(responses=[passage])
    graph = graph_of(
        {"lexical": lexical, "dense": dense},
        {"rewriter": {"kind": "hyde"}},
        rewriter_model=model,
    )
    result = graph.invoke({"query": QUESTION})

    assert lexical.queries == [QUESTION]  # never the passage
    assert sorted(dense.queries) == sorted([QUESTION, passage])
    assert set(statuses(result)) == {"q0:lexical", "q0:dense", "q1:dense"}  # 2x2 - 1
    assert result["queries"] == [
        {"text": QUESTION, "kind": "original"},
        {"text": passage, "kind": "hyde"},
    ]
    # the hypothetical passage is never evidence
    for doc in result["documents"]:
        assert passage not in doc["content"]
        assert passage not in str(doc["metadata"])
    assert passage not in result["answer"]
    assert "Lutetia" not in result["answer"]


def test_hyde_passage_never_reaches_the_generator_prompt(fakes):
    passage = "HYPOTHETICAL passage about Lutetia."
    generator = fakes.RecordingChatModel(responses=["Paris [1]."])
    graph = graph_of(
        {
            "lexical": fakes.ListRetriever(docs=[fakes.doc("p", "Paris is in France.", 1.0)]),
            "dense": fakes.DenseListRetriever(docs=[fakes.doc("p", "Paris is in France.", 0.5)]),
        },
        {"rewriter": {"kind": "hyde"}},
        rewriter_model=fakes.StaticChatModel(text=passage),
        generator_model=generator,
    )
    result = graph.invoke({"query": QUESTION})
    assert result["answer"] == "Paris [1]."
    (messages,) = generator.calls
    assert all("Lutetia" not in str(m.content) for m in messages)
    assert all("Lutetia" not in str(getattr(m, "tool_calls", "")) for m in messages)


def test_hyde_without_original_leaves_lexical_branches_out(fakes):
    lexical = fakes.ListRetriever()
    dense = fakes.DenseListRetriever(docs=[fakes.doc("x", "Some text about France.", 0.5)])
    graph = graph_of(
        {"lexical": lexical, "dense": dense},
        {"rewriter": {"kind": "hyde", "include_original": False}},
        rewriter_model=fakes.StaticChatModel(text="A passage on France."),
    )
    result = graph.invoke({"query": QUESTION})
    assert list(statuses(result)) == ["q0:dense"]
    assert lexical.queries == []
    assert result["queries"] == [{"text": "A passage on France.", "kind": "hyde"}]


# ---------------------------------------------------------------- concurrency (no timing)


def barrier_pair(fakes):
    barrier = threading.Barrier(2, timeout=5)
    docs = [fakes.doc("paris", "Paris is the capital of France.", 1.0)]
    return {
        "a": fakes.BarrierRetriever(barrier=barrier, docs=docs),
        "b": fakes.BarrierRetriever(barrier=barrier, docs=docs),
    }


def test_branches_run_concurrently_sync(fakes):
    result = graph_of(barrier_pair(fakes)).invoke({"query": QUESTION})
    assert statuses(result) == {"q0:a": "ok", "q0:b": "ok"}, result["branches"]
    assert result["warnings"] == []


async def test_branches_run_concurrently_async(fakes):
    result = await graph_of(barrier_pair(fakes)).ainvoke({"query": QUESTION})
    assert statuses(result) == {"q0:a": "ok", "q0:b": "ok"}, result["branches"]
    assert result["warnings"] == []


# ---------------------------------------------------------------- failure policy


def failing_pair(fakes):
    return {
        "bad": fakes.FailingRetriever(),
        "good": fakes.ListRetriever(docs=[fakes.doc("paris", "Paris is the capital.", 1.0)]),
    }


def test_failing_retriever_under_skip(fakes):
    result = graph_of(failing_pair(fakes), {"on_failure": "skip"}).invoke({"query": "capital"})
    bad, good = result["branches"]
    assert (bad["retriever"], bad["status"], bad["hits"]) == ("bad", "failed", 0)
    assert bad["error"] == "RuntimeError: backend down"
    assert good["status"] == "ok"
    assert result["warnings"] == []
    assert [d["id"] for d in result["documents"]] == ["paris"]
    assert result["answer"] != INSUFFICIENT_EVIDENCE


def test_failing_retriever_under_warn_is_the_default(fakes):
    for config in ({}, {"on_failure": "warn"}):
        result = graph_of(failing_pair(fakes), config).invoke({"query": "capital"})
        assert statuses(result) == {"q0:bad": "failed", "q0:good": "ok"}
        (warning,) = result["warnings"]
        assert "bad" in warning and "backend down" in warning
        assert [d["id"] for d in result["documents"]] == ["paris"]


def test_failing_retriever_under_block_stops_the_request(fakes):
    graph = graph_of(failing_pair(fakes), {"on_failure": "block"})
    with pytest.raises(BlockedError) as caught:
        graph.invoke({"query": "capital"})
    assert caught.value.component == "retriever 'bad'"
    assert "backend down" in str(caught.value)


async def test_failing_retriever_under_block_stops_the_async_request(fakes):
    graph = graph_of(failing_pair(fakes), {"on_failure": "block"})
    with pytest.raises(BlockedError, match="backend down"):
        await graph.ainvoke({"query": "capital"})


@pytest.mark.parametrize("policy", ["skip", "warn"])
def test_every_branch_failed_gives_insufficient_evidence(fakes, policy):
    model = fakes.ExplodingChatModel()
    graph = graph_of(
        {"a": fakes.FailingRetriever(), "b": fakes.FailingRetriever(message="also down")},
        {"on_failure": policy},
        generator_model=model,
    )
    result = graph.invoke({"query": "capital"})
    assert result["answer"] == INSUFFICIENT_EVIDENCE
    assert result["documents"] == [] and result["citations"] == []
    assert set(statuses(result).values()) == {"failed"}
    assert len(result["warnings"]) == (2 if policy == "warn" else 0)
    assert model.calls == 0


def test_empty_retriever_is_recorded_as_empty(fakes):
    retrievers = {
        "none": fakes.ListRetriever(docs=[]),
        "some": fakes.ListRetriever(docs=[fakes.doc("x", "Capital of France is Paris.", 1.0)]),
    }
    result = graph_of(retrievers).invoke({"query": "capital"})
    empty = result["branches"][0]
    assert (empty["status"], empty["hits"], empty["error"]) == ("empty", 0, None)
    assert result["warnings"] == []


def test_failure_of_one_branch_never_cancels_the_others_under_rewrites(fakes):
    retrievers = {
        "bad": fakes.FailingRetriever(),
        "good": fakes.ListRetriever(docs=[fakes.doc("p", "Paris is the capital.", 1.0)]),
    }
    graph = graph_of(
        retrievers,
        {"on_failure": "skip"},
        rewriter_model=fakes.StaticChatModel(text="capital city"),
    )
    result = graph.invoke({"query": "capital"})
    assert statuses(result) == {
        "q0:bad": "failed",
        "q0:good": "ok",
        "q1:bad": "failed",
        "q1:good": "ok",
    }
    assert retrievers["bad"].calls == 2


# ---------------------------------------------------------------- timeouts (node level)


def slow_node(fakes, policy="warn"):
    slow = fakes.BlockingRetriever(docs=[fakes.doc("s", "slow text", 1.0)], max_wait=2.0)
    branch = RetrievalBranch(
        name="slow",
        index=0,
        retriever=slow,
        kind="lexical",
        on_failure=policy,
        timeout_seconds=0.2,
    )
    task = RetrieveTask(
        view={"index": 0, "text": "question", "kind": "original"},
        retriever="slow",
        query="question",
        top_k=5,
        filters={},
    )
    return RetrieveNode({"slow": branch}, rerank=False), task, slow


def test_slow_retriever_times_out_sync(fakes):
    node, task, slow = slow_node(fakes)
    try:
        update = node.invoke(task, {})
        assert not slow.finished.is_set()  # returned while the retriever was still busy
    finally:
        slow.release.set()
    (result,) = update["branch_results"]
    assert result["status"] == "failed"
    assert result["hits"] == []
    assert result["error"] == "timed out after 0.2s"
    assert "timed out" in result["warning"]


async def test_slow_retriever_times_out_async(fakes):
    node, task, slow = slow_node(fakes)
    try:
        update = await asyncio.to_thread(node.invoke, task, {})
        assert not slow.finished.is_set()
    finally:
        slow.release.set()
    (result,) = update["branch_results"]
    assert result["status"] == "failed"
    assert result["error"] == "timed out after 0.2s"


def test_slow_retriever_under_block_raises(fakes):
    node, task, slow = slow_node(fakes, policy="block")
    try:
        with pytest.raises(BlockedError, match="timed out"):
            node.invoke(task, {})
    finally:
        slow.release.set()


async def test_slow_retriever_under_block_raises_async(fakes):
    node, task, slow = slow_node(fakes, policy="block")
    try:
        with pytest.raises(BlockedError, match="timed out"):
            await asyncio.to_thread(node.invoke, task, {})
    finally:
        slow.release.set()


def test_slow_retriever_under_skip_has_no_warning(fakes):
    node, task, slow = slow_node(fakes, policy="skip")
    try:
        (result,) = node.invoke(task, {})["branch_results"]
    finally:
        slow.release.set()
    assert result["status"] == "failed" and result["warning"] is None


def test_fast_retriever_within_timeout(fakes):
    node, task, slow = slow_node(fakes)
    slow.release.set()
    (result,) = node.invoke(task, {})["branch_results"]
    assert result["status"] == "ok" and [h["id"] for h in result["hits"]] == ["s"]


# ---------------------------------------------------------------- filters and tenant


def lang_docs(fakes):
    return [
        fakes.doc("en1", "Paris is the capital of France.", 0.9, lang="en", tenant="acme"),
        fakes.doc("fr1", "Paris est la capitale de la France.", 0.8, lang="fr", tenant="acme"),
        fakes.doc("en2", "France has a capital called Paris.", 0.7, lang="en", tenant="other"),
        fakes.doc("nolang", "Paris capital facts.", 0.6),
    ]


def test_filters_reach_our_backends_and_foreign_ones_are_post_filtered(fakes):
    ours = fakes.FilteringRetriever(docs=lang_docs(fakes))
    foreign = fakes.ListRetriever(docs=lang_docs(fakes))
    result = graph_of({"ours": ours, "foreign": foreign}).invoke(
        {"query": "capital of France", "top_k": 3, "filters": {"lang": "en"}}
    )
    assert ours.received == [{"k": 6, "filters": {"lang": "en"}}]
    assert {d["id"] for d in result["documents"]} == {"en1", "en2"}
    for doc in result["documents"]:
        assert doc["metadata"]["lang"] == "en"
        assert {s["retriever"] for s in doc["sources"]} == {"ours", "foreign"}


async def test_filters_reach_our_backends_on_the_async_path(fakes):
    ours = fakes.FilteringRetriever(docs=lang_docs(fakes))
    foreign = fakes.ListRetriever(docs=lang_docs(fakes))
    result = await graph_of({"ours": ours, "foreign": foreign}).ainvoke(
        {"query": "capital of France", "filters": {"lang": "fr"}}
    )
    assert ours.received == [{"k": 10, "filters": {"lang": "fr"}}]
    assert [d["id"] for d in result["documents"]] == ["fr1"]


def test_no_filters_means_none_for_our_backends(fakes):
    ours = fakes.FilteringRetriever(docs=lang_docs(fakes))
    result = graph_of({"ours": ours, "foreign": fakes.ListRetriever()}).invoke({"query": "capital"})
    assert ours.received == [{"k": 10, "filters": None}]
    assert len(result["documents"]) == 4


def test_tenant_becomes_a_mandatory_filter(fakes):
    ours = fakes.FilteringRetriever(docs=lang_docs(fakes))
    foreign = fakes.ListRetriever(docs=lang_docs(fakes))
    result = graph_of({"ours": ours, "foreign": foreign}).invoke(
        {"query": "capital of France", "tenant": "acme"}
    )
    assert ours.received == [{"k": 10, "filters": {"tenant": "acme"}}]
    assert {d["id"] for d in result["documents"]} == {"en1", "fr1"}
    assert all(d["metadata"]["tenant"] == "acme" for d in result["documents"])


def test_tenant_field_comes_from_config(fakes):
    docs = [
        fakes.doc("a", "Paris is the capital.", 0.9, org="acme"),
        fakes.doc("b", "Paris is the capital too.", 0.8, org="globex"),
    ]
    ours = fakes.FilteringRetriever(docs=docs)
    foreign = fakes.ListRetriever(docs=docs)
    result = graph_of({"ours": ours, "foreign": foreign}, {"tenant_field": "org"}).invoke(
        {"query": "capital", "tenant": "globex"}
    )
    assert ours.received == [{"k": 10, "filters": {"org": "globex"}}]
    assert [d["id"] for d in result["documents"]] == ["b"]


def test_tenant_combines_with_other_filters(fakes):
    ours = fakes.FilteringRetriever(docs=lang_docs(fakes))
    result = graph_of({"ours": ours, "foreign": fakes.ListRetriever(docs=lang_docs(fakes))}).invoke(
        {"query": "capital", "tenant": "acme", "filters": {"lang": "en", "tenant": "acme"}}
    )
    assert ours.received == [{"k": 10, "filters": {"lang": "en", "tenant": "acme"}}]
    assert [d["id"] for d in result["documents"]] == ["en1"]


@pytest.mark.parametrize("tenant_field", ["tenant", "org"])
def test_conflicting_tenant_filter_is_refused(fakes, tenant_field):
    ours = fakes.FilteringRetriever(docs=lang_docs(fakes))
    foreign = fakes.ListRetriever(docs=lang_docs(fakes))
    graph = graph_of({"ours": ours, "foreign": foreign}, {"tenant_field": tenant_field})
    with pytest.raises(ValueError, match=f"filters.{tenant_field}"):
        graph.invoke({"query": "capital", "tenant": "acme", "filters": {tenant_field: "other"}})
    assert ours.received == [] and foreign.queries == []  # nothing ran, nothing mixed


def test_conflicting_tenant_filter_is_refused_after_a_rewrite(fakes):
    foreign = fakes.ListRetriever(docs=lang_docs(fakes))
    graph = graph_of(
        {"a": foreign, "b": fakes.ListRetriever()},
        rewriter_model=fakes.StaticChatModel(text="capital city"),
    )
    with pytest.raises(ValueError, match="filters.tenant"):
        graph.invoke({"query": "capital", "tenant": "acme", "filters": {"tenant": "other"}})
    assert foreign.queries == []


# ---------------------------------------------------------------- rerank


RERANK = {"reranker": {"kind": "embedding"}}


def rerank_corpus(fakes):
    docs = [
        fakes.doc("alpha", "alpha text", 0.9),
        fakes.doc("beta", "beta text", 0.8),
        fakes.doc("gamma", "gamma text", 0.7),
    ]
    return {"a": fakes.ListRetriever(docs=docs), "b": fakes.ListRetriever(docs=docs[:2])}


def sources_of(result, retriever: str, view: int = 0) -> dict[str, dict]:
    found = {}
    for doc in result["documents"]:
        for source in doc["sources"]:
            if source["branch"] == f"q{view}:{retriever}":
                found[doc["id"]] = source
    return found


def test_rerank_orders_by_score_and_keeps_ids_and_retrieval_scores(fakes):
    scorer = FakeScorer({"gamma text": 0.95, "alpha text": 0.5, "beta text": 0.5}, default=0.0)
    graph = graph_of(rerank_corpus(fakes), {"reranker": {"kind": "embedding"}}, scorer=scorer)
    result = graph.invoke({"query": "greek letters", "top_k": 5})
    a = sources_of(result, "a")
    # higher first; the equal alpha/beta keep retrieval order
    assert {i: s["rank"] for i, s in a.items()} == {"gamma": 1, "alpha": 2, "beta": 3}
    assert {i: s["score"] for i, s in a.items()} == {"alpha": 0.9, "beta": 0.8, "gamma": 0.7}
    assert {i: s["rerank_score"] for i, s in a.items()} == {
        "alpha": 0.5,
        "beta": 0.5,
        "gamma": 0.95,
    }
    b = sources_of(result, "b")
    assert {i: s["rank"] for i, s in b.items()} == {"alpha": 1, "beta": 2}
    assert {d["id"] for d in result["documents"]} == {"alpha", "beta", "gamma"}
    assert len(scorer.calls) == 2
    records = {r["branch"]: r for r in result["branches"]}
    assert all(r["rerank_ms"] is not None for r in records.values())


def test_rerank_equal_scores_keep_retrieval_order(fakes):
    scorer = FakeScorer(default=0.3)
    result = graph_of(rerank_corpus(fakes), RERANK, scorer=scorer).invoke({"query": "x"})
    a = sources_of(result, "a")
    assert {i: s["rank"] for i, s in a.items()} == {"alpha": 1, "beta": 2, "gamma": 3}


def test_rerank_scores_against_the_original_query_even_for_rewrites(fakes):
    scorer = FakeScorer()
    graph = graph_of(
        rerank_corpus(fakes),
        {"reranker": {"kind": "embedding"}},
        rewriter_model=fakes.StaticChatModel(text="first rewrite\nsecond rewrite"),
        scorer=scorer,
    )
    result = graph.invoke({"query": "the original question"})
    assert [q["kind"] for q in result["queries"]] == ["original", "rewrite", "rewrite"]
    assert len(scorer.calls) == 6  # one per ok branch: 3 views x 2 retrievers
    assert {query for query, _ in scorer.calls} == {"the original question"}


def test_rerank_top_k_keeps_n_per_branch(fakes):
    scorer = FakeScorer({"gamma text": 0.9, "beta text": 0.1, "alpha text": 0.2})
    config = {"reranker": {"kind": "embedding", "top_k": 1}}
    graph = graph_of(rerank_corpus(fakes), config, scorer=scorer)
    result = graph.invoke({"query": "x"})
    assert [(b["retriever"], b["hits"]) for b in result["branches"]] == [("a", 1), ("b", 1)]
    assert sorted(d["id"] for d in result["documents"]) == ["alpha", "gamma"]


def test_rerank_skips_failed_and_empty_branches(fakes):
    scorer = FakeScorer()
    retrievers = {
        "bad": fakes.FailingRetriever(),
        "none": fakes.ListRetriever(),
        "good": fakes.ListRetriever(docs=[fakes.doc("g", "good text", 1.0)]),
    }
    config = {"reranker": {"kind": "embedding"}, "on_failure": "skip"}
    graph = graph_of(retrievers, config, scorer=scorer)
    result = graph.invoke({"query": "x"})
    assert statuses(result) == {"q0:bad": "failed", "q0:none": "empty", "q0:good": "ok"}
    assert scorer.calls == [("x", ["good text"])]


BAD_SCORERS = {
    "nan": lambda: FakeScorer(values=[math.nan, 0.5, 0.1]),
    "inf": lambda: FakeScorer(values=[0.1, math.inf, 0.3]),
    "raises": lambda: FakeScorer(fail=RuntimeError("reranker model missing")),
    "wrong-count": lambda: FakeScorer(values=[0.5]),
}


@pytest.mark.parametrize("kind", sorted(BAD_SCORERS))
def test_rerank_problems_under_skip_keep_retrieval_order_silently(fakes, kind):
    config = {"reranker": {"kind": "embedding", "on_failure": "skip"}}
    result = graph_of(rerank_corpus(fakes), config, scorer=BAD_SCORERS[kind]()).invoke(
        {"query": "x"}
    )
    assert result["warnings"] == []
    a = sources_of(result, "a")
    assert {i: s["rank"] for i, s in a.items()} == {"alpha": 1, "beta": 2, "gamma": 3}
    assert all("rerank_score" not in s for s in a.values())
    assert set(statuses(result).values()) == {"ok"}


@pytest.mark.parametrize("kind", sorted(BAD_SCORERS))
def test_rerank_problems_under_warn_add_a_warning(fakes, kind):
    result = graph_of(rerank_corpus(fakes), RERANK, scorer=BAD_SCORERS[kind]()).invoke(
        {"query": "x"}
    )
    assert len(result["warnings"]) == 2  # pipeline default warn, one per branch
    assert all("reranker" in w for w in result["warnings"])
    assert {i: s["rank"] for i, s in sources_of(result, "a").items()} == {
        "alpha": 1,
        "beta": 2,
        "gamma": 3,
    }


@pytest.mark.parametrize("kind", sorted(BAD_SCORERS))
def test_rerank_problems_under_block_stop_the_request(fakes, kind):
    config = {"reranker": {"kind": "embedding"}, "on_failure": "block"}
    with pytest.raises(BlockedError, match="reranker"):
        graph_of(rerank_corpus(fakes), config, scorer=BAD_SCORERS[kind]()).invoke({"query": "x"})


async def test_rerank_on_the_async_path(fakes):
    scorer = FakeScorer({"gamma text": 1.0})
    result = await graph_of(rerank_corpus(fakes), RERANK, scorer=scorer).ainvoke({"query": "x"})
    assert {i: s["rank"] for i, s in sources_of(result, "a").items()} == {
        "gamma": 1,
        "alpha": 2,
        "beta": 3,
    }


def test_rerank_node_level_order_and_intact_fields(fakes):
    from parallel_rag.nodes.rerank.node import rerank_hits

    hits = fakes.branch_result(0, "a", 0, [("x", 1, 5.0), ("y", 2, 4.0), ("z", 3, 3.0)])["hits"]
    reranked = rerank_hits(hits, [0.1, 0.7, 0.1], top_k=None)
    assert [(h["id"], h["rank"], h["score"], h["rerank_score"]) for h in reranked] == [
        ("y", 1, 4.0, 0.7),
        ("x", 2, 5.0, 0.1),
        ("z", 3, 3.0, 0.1),
    ]
    assert [h["content"] for h in reranked] == [
        hits[1]["content"],
        hits[0]["content"],
        hits[2]["content"],
    ]
    assert hits[0]["rank"] == 1 and "rerank_score" not in hits[0]  # input untouched
    assert [h["id"] for h in rerank_hits(hits, [0.1, 0.7, 0.1], top_k=2)] == ["y", "x"]
