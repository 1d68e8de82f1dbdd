"""``RAGGraphs.warm_up`` opens every branch's index and store before the first request.

A store of a million chunks takes longer to read than a branch's default timeout, so a server
whose first request opened it would time that branch out. These tests run the real stores of
the example corpus (BM25 and Qdrant Edge on disk): after ``warm_up`` a run opens nothing more,
and a branch that cannot be opened is reported without stopping the others."""

from __future__ import annotations

import logging

import pytest
from parallel_rag.backends.bm25 import retriever as bm25
from parallel_rag.backends.hybrid.retriever import HybridRetriever
from parallel_rag.backends.qdrant_edge import search as qdrant_edge_search
from parallel_rag.graph.builder import build_graph, build_graphs
from parallel_rag.studio.cli import main

pytestmark = pytest.mark.integration

QUESTION = "Which algorithm did Ada Lovelace publish for the Analytical Engine?"


def refuse_opening(monkeypatch) -> list[str]:
    """From here on, reading a BM25 index or a Qdrant Edge shard from disk fails (and is
    recorded): what a run still opens shows up as a failed branch."""
    opened: list[str] = []

    def edge_load(path, *args, **kwargs):
        opened.append(f"edge:{path}")
        raise RuntimeError("opened a Qdrant Edge shard during the run")

    def bm25_load(path, *args, **kwargs):
        opened.append(f"bm25:{path}")
        raise RuntimeError("read a BM25 index during the run")

    monkeypatch.setattr(qdrant_edge_search.EdgeShard, "load", staticmethod(edge_load))
    monkeypatch.setattr(bm25.BM25Index, "load", staticmethod(bm25_load))
    return opened


@pytest.fixture()
def fresh_stores():
    """No Qdrant Edge revision held open by earlier tests of this process (a new graph's
    BM25 retriever holds no index of its own yet)."""
    qdrant_edge_search._open.clear()


def test_after_warm_up_a_run_opens_no_index_or_store(example_index, fresh_stores, monkeypatch):
    config, base_dir, _ = example_index
    graphs = build_graphs(config, base_dir=base_dir)
    graph = graphs.graph
    assert graphs.warm_up() == {}
    opened = refuse_opening(monkeypatch)

    result = graph.invoke({"query": QUESTION, "top_k": 3})

    assert opened == []
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "lexical": "ok",
        "dense": "ok",
    }
    assert "Bernoulli" in result["answer"]


def test_without_warm_up_the_first_run_opens_them(example_index, fresh_stores, monkeypatch):
    """The check above is sensitive: a graph not warmed up reads both stores in its run."""
    config, base_dir, _ = example_index
    graph = build_graph(config, base_dir=base_dir)
    opened = refuse_opening(monkeypatch)

    result = graph.invoke({"query": QUESTION, "top_k": 3})

    assert sorted(o.split(":")[0] for o in opened) == ["bm25", "edge"]
    assert {b["status"] for b in result["branches"]} == {"failed"}


def test_a_branch_that_cannot_be_opened_is_reported_and_the_others_open(
    example_index, fresh_stores, monkeypatch, caplog
):
    _, base_dir, _ = example_index
    config = {
        "retrievers": [
            {"name": "lexical", "backend": "bm25"},
            {"name": "dense", "backend": "qdrant_edge"},
            {"name": "nowhere", "backend": "qdrant_edge", "backend_config": {"collection": "none"}},
        ]
    }
    graphs = build_graphs(config, base_dir=base_dir)
    graph = graphs.graph
    with caplog.at_level(logging.WARNING, logger="parallel_rag.graph.compiled"):
        failed = graphs.warm_up()

    assert list(failed) == ["nowhere"]
    assert failed["nowhere"].startswith("LookupError: Qdrant Edge collection 'none' does not")
    assert "retriever 'nowhere' could not be opened ahead" in caplog.text
    opened = refuse_opening(monkeypatch)
    result = graph.invoke({"query": QUESTION, "top_k": 3})
    assert opened == []  # the two that could be opened were
    status = {b["retriever"]: b["status"] for b in result["branches"]}
    assert status == {"lexical": "ok", "dense": "ok", "nowhere": "failed"}
    errors = {b["retriever"]: b["error"] for b in result["branches"]}
    assert "Qdrant Edge collection 'none' does not exist" in errors["nowhere"]


class _Leg:
    """A leg that records its warm-up, failing when told to (control flow only)."""

    def __init__(self, name: str, calls: list[str], error: Exception | None = None):
        self.name, self.calls, self.error = name, calls, error

    def warm_up(self) -> None:
        self.calls.append(self.name)
        if self.error is not None:
            raise self.error


def test_a_hybrid_warms_both_legs_and_raises_the_first_failure(example_index, fresh_stores):
    config, base_dir, _ = example_index
    lexical, dense = (r for _, r in build_graphs(config, base_dir=base_dir).retrievers)
    hybrid = HybridRetriever(primary=dense, fallback=lexical)
    hybrid.warm_up()
    assert lexical.get_index() is not None
    assert qdrant_edge_search._open  # the dense leg's revision is held open

    calls: list[str] = []
    broken = HybridRetriever.model_construct(
        primary=_Leg("primary", calls, LookupError("no collection")),
        fallback=_Leg("fallback", calls),
    )
    with pytest.raises(LookupError, match="no collection"):
        broken.warm_up()
    assert calls == ["primary", "fallback"]


def test_cli_ask_opens_the_index_before_the_run(example_index, monkeypatch, capsys, tmp_path):
    """``parallel-rag ask`` reads the index before the graph runs, outside the branch's
    timeout, and the run then searches the index already read."""
    from parallel_rag.studio.cli import answers

    _, base_dir, _ = example_index
    index = (base_dir / bm25.DEFAULT_INDEX_PATH).resolve()
    config = tmp_path / "parallel-rag.yaml"
    config.write_text(
        "retrievers:\n"
        f"  - {{name: lexical, backend: bm25, backend_config: {{index_path: '{index}'}}}}\n"
        f"  - {{name: tuned, backend: bm25, backend_config: {{index_path: '{index}', k1: 1.2}}}}\n"
        "generator: {min_similarity: null}\n",
        encoding="utf-8",
    )
    events: list[str] = []
    load, run = bm25.BM25Index.load, answers.run_with_progress

    def recorded_load(*args, **kwargs):
        events.append("index read")
        return load(*args, **kwargs)

    def recorded_run(*args, **kwargs):
        events.append("run")
        return run(*args, **kwargs)

    monkeypatch.setattr(bm25.BM25Index, "load", staticmethod(recorded_load))
    monkeypatch.setattr(answers, "run_with_progress", recorded_run)
    assert main(["--config", str(config), "ask", "--json", "--no-progress", QUESTION]) == 0
    assert events == ["index read", "index read", "run"]  # each branch's retriever, then the run
    assert capsys.readouterr().out.count('"status": "ok"') == 2


def test_the_router_warms_up_every_route(example_index, fresh_stores, monkeypatch, tmp_path):
    """``parallel-rag serve`` with routes: each route's graph opens its stores before traffic."""
    import yaml
    from parallel_rag.studio.router.configuration import load_router
    from parallel_rag.studio.router.runtime import RouterRuntime

    config, base_dir, _ = example_index
    retrievers = config.model_dump(mode="json", exclude_unset=True)["retrievers"]
    rag = {"type": "rag", "configuration": {"retrievers": retrievers, "top_k": 3}}
    router = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},  # never called here
        "routing": {
            "default": "chat",
            "decisions": [
                {"name": "docs", "model": "m", "plugins": [rag]},
                {"name": "chat", "model": "m"},
            ],
        },
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(router), encoding="utf-8")
    runtime = RouterRuntime(load_router(path)[0], base_dir)
    runtime.warm_up()
    opened = refuse_opening(monkeypatch)

    result = runtime.routes["docs"].graph.invoke({"query": QUESTION, "top_k": 3})

    assert opened == []
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "lexical": "ok",
        "dense": "ok",
    }


def test_the_fusion_retriever_warms_up_its_graph(example_index, fresh_stores, monkeypatch):
    """In a user's own LangChain app: ``ParallelFusionRetriever.warm_up`` before the first call."""
    from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever

    config, base_dir, _ = example_index
    retriever = ParallelFusionRetriever.from_config(config, base_dir=base_dir, top_k=3)
    assert retriever.warm_up() == {}
    opened = refuse_opening(monkeypatch)

    documents = retriever.invoke(QUESTION)

    assert opened == []
    assert {s["retriever"] for d in documents for s in d.metadata["sources"]} == {
        "lexical",
        "dense",
    }
