"""Per-run knobs (``graph/context.py``): the context schema, its ``configurable`` fallback, each
knob's effect on a run, the refusals, branch progress on the custom stream, the LangServe
config guard, and ``ParallelFusionRetriever`` — all offline, on in-test retrievers."""

from __future__ import annotations

import io
import json

import pytest
from fake_scorer import FakeScorer
from fastapi.exceptions import RequestValidationError
from langchain_classic.retrievers import EnsembleRetriever
from parallel_rag.graph.builder import retrieval_graph_of
from parallel_rag.graph.context import (
    KNOBS,
    KnobError,
    KnobScope,
    RAGContext,
    knobs_from,
)
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever
from parallel_rag.graph.state import RAGRequest
from parallel_rag.nodes import prompts
from parallel_rag.studio.cli.output import format_progress, run_with_progress
from parallel_rag.studio.langserve_app import make_config_guard
from pydantic import ValidationError
from small_graphs import compiled_graphs, graph_of, two_lists

QUESTION = "What is the capital of France?"


# ---------------------------------------------------------------- the schema


def test_context_schema_lists_exactly_the_knobs_and_nothing_that_redirects(fakes):
    schema = graph_of(two_lists(fakes)).get_context_jsonschema()
    assert (
        set(schema["properties"])
        == KNOBS
        == {
            "retrievers",
            "retriever_top_k",
            "fusion_k",
            "fusion_weights",
            "fusion_method",
            "rerank",
            "rewriter",
        }
    )
    assert schema["additionalProperties"] is False
    for name in KNOBS:
        assert not any(w in name for w in ("url", "key", "path", "model", "endpoint", "host"))
        assert schema["properties"][name]["description"]


def test_context_wins_over_configurable_field_by_field():
    knobs = knobs_from(
        {"fusion_k": 5}, {"fusion_k": 9, "retriever_top_k": 3, "thread_id": "t", "x": None}
    )
    assert knobs.fusion_k == 5 and knobs.retriever_top_k == 3
    assert knobs_from(None, None) == RAGContext()
    assert knobs_from(RAGContext(rerank=False), {}).rerank is False


def test_bad_knob_values_name_their_field():
    with pytest.raises(KnobError) as raised:
        knobs_from(None, {"fusion_k": 0})
    assert raised.value.field == "configurable.fusion_k"
    with pytest.raises(KnobError) as raised:
        knobs_from({"retrievers": ["a", "b", "c", "d", "e"]}, None)
    assert raised.value.field == "context.retrievers"
    assert knobs_from({"retrievers": [], "fusion_weights": {}}, None) == RAGContext()


# ---------------------------------------------------------------- each knob does what it says


@pytest.mark.parametrize("how", ["context", "configurable"])
def test_retrievers_knob_runs_only_the_named_branches(fakes, how):
    retrievers = two_lists(fakes)
    graph = graph_of(retrievers)
    knobs = {"retrievers": ["b"]}
    if how == "context":
        result = graph.invoke({"query": QUESTION}, context=knobs)
    else:
        result = graph.invoke({"query": QUESTION}, config={"configurable": knobs})
    assert [b["retriever"] for b in result["branches"]] == ["b"]
    assert retrievers["a"].queries == [] and retrievers["b"].queries == [QUESTION]
    assert {d["id"] for d in result["documents"]} == {"berlin", "paris"}


def test_unknown_or_invalid_knobs_are_refused_before_any_branch_runs(fakes):
    retrievers = two_lists(fakes)
    graph = graph_of(retrievers)
    with pytest.raises(KnobError, match="retrievers: unknown retriever"):
        graph.invoke({"query": QUESTION}, context={"retrievers": ["nope"]})
    with pytest.raises(KnobError, match="fusion_weights: unknown retriever"):
        graph.invoke({"query": QUESTION}, config={"configurable": {"fusion_weights": {"zz": 2.0}}})
    with pytest.raises(ValidationError, match="base_url"):
        graph.invoke({"query": QUESTION}, context={"base_url": "http://elsewhere"})
    with pytest.raises(KnobError, match="rerank: no reranker"):
        graph.invoke({"query": QUESTION}, context={"rerank": True})
    with pytest.raises(KnobError, match="rewriter: no rewriter"):
        graph.invoke({"query": QUESTION}, context={"rewriter": "multi_query"})
    assert retrievers["a"].queries == [] and retrievers["b"].queries == []


def test_retriever_top_k_sets_each_branch_candidate_count(fakes):
    docs = [fakes.doc(f"d{i}", f"text {i}", 1.0 - i / 10) for i in range(8)]
    own = fakes.FilteringRetriever(docs=docs)
    foreign = fakes.ListRetriever(docs=docs)
    graph = graph_of({"own": own, "foreign": foreign})
    result = graph.invoke({"query": "text", "top_k": 5}, context={"retriever_top_k": 3})
    assert own.received[-1]["k"] == 3
    assert {b["retriever"]: b["hits"] for b in result["branches"]} == {"own": 3, "foreign": 3}
    graph.invoke({"query": "text", "top_k": 2})
    assert own.received[-1]["k"] == 4  # default: twice the request's top_k


def test_fusion_k_and_weights_change_the_scores_as_rrf_says(fakes):
    # a: paris #1, lyon #2; b: berlin #1, paris #2
    graph = graph_of(
        two_lists(fakes), {"fusion": {"method": "rrf", "k": 60, "weights": {"a": 1.0}}}
    )
    plain = graph.invoke({"query": QUESTION})
    assert [d["id"] for d in plain["documents"]] == ["paris", "berlin", "lyon"]
    assert plain["documents"][0]["fused_score"] == pytest.approx(1 / 61 + 1 / 62)
    tuned = graph.invoke({"query": QUESTION}, context={"fusion_k": 1, "fusion_weights": {"b": 4.0}})
    scores = {d["id"]: d["fused_score"] for d in tuned["documents"]}
    assert scores == pytest.approx({"berlin": 4 / 2, "paris": 1 / 2 + 4 / 3, "lyon": 1 / 3})
    assert [d["id"] for d in tuned["documents"]] == ["berlin", "paris", "lyon"]


@pytest.mark.parametrize("how", ["context", "configurable"])
def test_a_fusion_k_without_a_fusion_method_means_rrf(fakes, how):
    # the configuration's rule per run: the graph fuses by min-max, and a run that asks for
    # RRF's k alone gets RRF with that k, not min-max with k unused
    graph = graph_of(two_lists(fakes), {"fusion": {"method": "minmax"}})
    asked = {"fusion_k": 1}
    run = {"context": asked} if how == "context" else {"config": {"configurable": asked}}
    bare = graph.invoke({"query": QUESTION}, **run)
    explicit = graph.invoke({"query": QUESTION}, context={"fusion_method": "rrf", "fusion_k": 1})
    assert bare["documents"] == explicit["documents"]
    scores = {d["id"]: d["fused_score"] for d in bare["documents"]}
    assert scores == pytest.approx({"paris": 1 / 2 + 1 / 3, "berlin": 1 / 2, "lyon": 1 / 3})
    assert knobs_from({"fusion_k": 1}, None).fusion_method == "rrf"


def test_a_fusion_k_beside_a_score_fusion_method_is_refused_naming_fusion_method():
    with pytest.raises(KnobError) as raised:
        knobs_from({"fusion_k": 30, "fusion_method": "minmax"}, None)
    assert raised.value.field == "context.fusion_method"
    assert "drop fusion_k, or set fusion_method: rrf" in str(raised.value)
    with pytest.raises(KnobError) as raised:  # k in one place, the score method in the other
        knobs_from({"fusion_method": "zscore"}, {"fusion_k": 30})
    assert raised.value.field == "context.fusion_method"
    assert knobs_from({"fusion_method": "minmax"}, None).fusion_k is None  # k unset: fine


def test_rerank_knob_switches_the_configured_reranker_off_for_one_run(fakes):
    scorer = FakeScorer(by_length=True)
    graph = graph_of(two_lists(fakes), {"reranker": {"kind": "embedding"}}, scorer=scorer)
    reranked = graph.invoke({"query": QUESTION})
    assert len(scorer.calls) == 2
    assert all(b["rerank_ms"] is not None for b in reranked["branches"])
    plain = graph.invoke({"query": QUESTION}, context={"rerank": False})
    assert len(scorer.calls) == 2, "the scorer ran although the run switched reranking off"
    assert all(b["rerank_ms"] is None for b in plain["branches"])
    assert all("rerank_score" not in s for d in plain["documents"] for s in d["sources"])
    assert plain["answer"] and "fuse" in plain["timings"]
    drawn = {(e.source, e.target) for e in graph.get_graph().edges}
    assert {("retrieve", "rerank"), ("retrieve", "fuse"), ("rerank", "fuse")} <= drawn


def test_rewriter_knob_none_skips_the_model_and_kinds_switch_the_prompt(fakes):
    model = fakes.RecordingChatModel(responses=["Which city is France's capital?"])
    retrievers = two_lists(fakes)
    graph = graph_of(retrievers, rewriter_model=model)

    skipped = graph.invoke({"query": QUESTION}, context={"rewriter": "none"})
    assert model.calls == [] and [q["kind"] for q in skipped["queries"]] == ["original"]

    default = graph.invoke({"query": QUESTION})
    assert prompts.MULTI_QUERY_PROMPT.split("{")[0] in model.calls[-1][0].content
    assert [q["kind"] for q in default["queries"]] == ["original", "rewrite"]

    graph.invoke({"query": QUESTION}, config={"configurable": {"rewriter": "decompose"}})
    assert prompts.DECOMPOSE_PROMPT.split("{")[0] in model.calls[-1][0].content


def test_hyde_knob_sends_the_passage_to_dense_retrievers_only(fakes):
    model = fakes.RecordingChatModel(responses=["Paris has been the capital of France."])
    dense = fakes.DenseListRetriever(docs=[fakes.doc("paris", "Paris is the capital.")])
    lexical = fakes.ListRetriever(docs=[fakes.doc("lyon", "Lyon.")])
    graph = graph_of({"lexical": lexical, "dense": dense}, rewriter_model=model)
    result = graph.invoke({"query": QUESTION}, context={"rewriter": "hyde"})
    assert prompts.HYDE_PROMPT.split("{")[0] in model.calls[-1][0].content
    assert lexical.queries == [QUESTION]
    # both views reach the dense branch at once: in either order
    assert sorted(dense.queries) == ["Paris has been the capital of France.", QUESTION]
    assert [q["kind"] for q in result["queries"]] == ["original", "hyde"]
    with pytest.raises(KnobError, match="hyde"):
        graph.invoke({"query": QUESTION}, context={"rewriter": "hyde", "retrievers": ["lexical"]})


def test_knobs_are_runtime_context_never_state_nor_send_payloads(fakes):
    """Nodes read the run's knobs from ``runtime.context``: no state channel and no ``Send``
    payload carries them, so a node added between the fan-out and ``fuse`` (here ``rerank``)
    has nothing to pass on, and ``fuse`` after it still applies the run's fusion knobs."""
    scorer = FakeScorer(by_length=True)
    graph = graph_of(
        two_lists(fakes),
        {"reranker": {"kind": "embedding"}, "fusion": {"method": "rrf", "k": 60}},
        scorer=scorer,
    )
    assert "knobs" not in graph.channels
    seen: list = []
    knobs = {"fusion_k": 1, "fusion_weights": {"b": 4.0}, "retriever_top_k": 2}
    for mode, chunk in graph.stream(
        {"query": QUESTION}, context=knobs, stream_mode=["values", "tasks"]
    ):
        seen.append(chunk if mode == "values" else chunk.get("input"))
    assert not any("knobs" in json.dumps(item, default=str) for item in seen)
    sent = [c for c in seen if isinstance(c, dict) and "retriever" in c and "view" in c]
    # the run's first task also carries the request it writes (graph/request.py): no knob
    task = {"view", "retriever", "query", "top_k", "filters"}
    assert sent and all(set(c) - {"request", "messages"} == task for c in sent)
    assert sum("request" in c for c in sent) == 1
    assert set(next(c for c in sent if "request" in c)["request"]) <= set(RAGRequest.model_fields)
    final = seen[-1]
    # reranked by length (longest first), then RRF with k=1 and b weighted 4
    assert {d["id"]: d["fused_score"] for d in final["documents"]} == pytest.approx(
        {"paris": 1 / 2 + 4 / 2, "berlin": 4 / 3, "lyon": 1 / 3}
    )


def test_the_same_knobs_as_context_or_configurable_give_the_same_run(fakes):
    graph = graph_of(two_lists(fakes), {"fusion": {"method": "rrf", "k": 60}})
    knobs = {"fusion_k": 1, "fusion_weights": {"b": 4.0}}
    by_context = graph.invoke({"query": QUESTION}, context=knobs)
    by_configurable = graph.invoke({"query": QUESTION}, config={"configurable": knobs})
    assert by_context["documents"] == by_configurable["documents"]
    assert by_context["documents"] != graph.invoke({"query": QUESTION})["documents"]
    # a with_config copy keeps its knobs; a run's context still wins field by field
    bound = graph.with_config(configurable={"fusion_k": 1, "retrievers": ["a"]})
    assert [b["retriever"] for b in bound.invoke({"query": QUESTION})["branches"]] == ["a"]
    both = bound.invoke({"query": QUESTION}, context={"retrievers": ["b"]})
    assert [b["retriever"] for b in both["branches"]] == ["b"]
    with pytest.raises(KnobError, match="configurable.api_key"):
        graph.invoke({"query": QUESTION}, config={"configurable": {"api_key": "sk-x"}})


def test_knob_scope_checks_without_a_graph():
    scope = KnobScope(retrievers=("a", "b"), dense=frozenset({"b"}), rewriter_kind="hyde")
    assert scope.check(RAGContext(retrievers=["b"])).retrievers == ["b"]
    with pytest.raises(KnobError) as raised:
        scope.check(RAGContext(retrievers=["a"]))
    assert raised.value.field == "retrievers"
    with pytest.raises(KnobError, match="more than once"):
        scope.check(RAGContext(retrievers=["b", "b"]))


# ---------------------------------------------------------------- progress


def test_each_branch_reports_on_the_custom_stream_as_it_finishes(fakes):
    retrievers = {**two_lists(fakes), "down": fakes.FailingRetriever()}
    graph = graph_of(retrievers)
    events = [e for e in graph.stream({"query": QUESTION}, stream_mode="custom")]
    assert sorted(e["branch"] for e in events) == ["q0:a", "q0:b", "q0:down"]
    assert {e["event"] for e in events} == {"branch_finished"}
    failed = next(e for e in events if e["retriever"] == "down")
    assert failed["status"] == "failed" and "backend down" in failed["error"]
    # the result is unchanged by streaming, and plain invoke emits nothing extra
    assert graph.invoke({"query": QUESTION})["branches"][0]["status"] == "ok"


def test_ask_progress_lines_come_before_the_result(fakes):
    graph = graph_of({**two_lists(fakes), "down": fakes.FailingRetriever()})
    out = io.StringIO()
    result = run_with_progress(graph, {"query": QUESTION, "top_k": 5}, out=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and result["answer"]
    assert set(result) == set(graph.invoke({"query": QUESTION}))  # the same keys as invoke's result
    assert any("q0:down (original): failed" in line and "backend down" in line for line in lines)
    quiet = io.StringIO()
    run_with_progress(graph, {"query": QUESTION, "top_k": 5}, show=False, out=quiet)
    assert quiet.getvalue() == ""
    assert format_progress(
        {
            "branch": "q1:x",
            "view_kind": "hyde",
            "status": "ok",
            "hits": 2,
            "latency_ms": 3.4,
            "error": None,
        }
    ) == ("  q1:x (hyde): ok, 2 hit(s), 3 ms")


# ---------------------------------------------------------------- the LangServe whitelist


def test_langserve_guard_keeps_only_valid_knobs():
    guard = make_config_guard(KnobScope(retrievers=("a", "b")))
    assert guard({"configurable": {"fusion_k": 3, "rerank": None}}, None) == {
        "configurable": {"fusion_k": 3, "fusion_method": "rrf"}  # a bare k means rrf
    }
    for bad, field in [
        ({"api_key": "sk-x"}, "api_key"),
        ({"base_url": "http://x"}, "base_url"),
        ({"index_path": "/etc"}, "index_path"),
        ({"retrievers": ["c"]}, "retrievers"),
        ({"fusion_k": -1}, "fusion_k"),
    ]:
        with pytest.raises(RequestValidationError) as raised:
            guard({"configurable": bad}, None)
        assert raised.value.errors()[0]["loc"][-1] == field


# ---------------------------------------------------------------- ParallelFusionRetriever


def test_parallel_fusion_retriever_matches_ensemble_retriever_and_keeps_sources(fakes):
    retrievers = two_lists(fakes)
    ensemble = EnsembleRetriever(retrievers=list(retrievers.values()), weights=[0.7, 0.3])
    ours = ParallelFusionRetriever.from_retrievers(
        list(retrievers.values()), weights=[0.7, 0.3], top_k=10
    )
    expected = [d.page_content for d in ensemble.invoke(QUESTION)]
    got = ours.invoke(QUESTION)
    assert [d.page_content for d in got] == expected
    top = got[0]
    assert top.id == "paris" and top.metadata["fused_rank"] == 1
    assert {s["retriever"] for s in top.metadata["sources"]} == {"retriever_0", "retriever_1"}


async def test_parallel_fusion_retriever_never_generates_and_takes_knobs(fakes):
    graphs = compiled_graphs(two_lists(fakes), generator_model=fakes.ExplodingChatModel())
    retriever = ParallelFusionRetriever(graph=graphs, top_k=2)
    assert [d.id for d in retriever.invoke(QUESTION)] == ["paris", "berlin"]
    only_b = retriever.with_config(configurable={"retrievers": ["b"]})
    docs = await only_b.ainvoke(QUESTION)
    assert {s["retriever"] for d in docs for s in d.metadata["sources"]} == {"b"}
    # the answer graph has a generate node; the retriever runs its retrieval graph, which has none
    assert graphs.graph.get_graph().nodes["generate"]
    assert "generate" not in retrieval_graph_of(graphs).get_graph().nodes
    with_context = ParallelFusionRetriever(graph=graphs, context=RAGContext(retrievers=["a"]))
    assert [d.id for d in with_context.invoke(QUESTION)] == ["paris", "lyon"]


def test_served_schemas_have_no_null_branches_for_the_playground_form(fakes):
    """LangServe's playground cannot draw ``{"type": "null"}``; the served input and config
    schemas show optional fields as their type (validation is unchanged)."""
    from fastapi.testclient import TestClient
    from parallel_rag.studio.langserve_app import create_app

    client = TestClient(create_app(compiled_graphs(two_lists(fakes))))
    for route in ("input_schema", "config_schema"):
        schema = client.get(f"/rag/{route}").json()
        assert '"type": "null"' not in json.dumps(schema), route
    request = client.get("/rag/input_schema").json()
    assert set(request["properties"]) == {"query", "messages", "top_k", "filters", "tenant"}
    accepted = client.post("/rag/invoke", json={"input": {"query": QUESTION, "tenant": None}})
    assert accepted.status_code == 200  # null still means unset
    refused = client.post("/rag/invoke", json={"input": {"query": QUESTION, "tenant": ""}})
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "input.tenant"
