"""``parallel-rag eval`` scores the fused list from the graph's retrieval path alone (rewrite ->
retrieve -> rerank -> fuse): the same ranking the whole graph returns, and no generation.

Real parts: a BEIR-layout folder on disk, two real BM25 indexes (different k1/b, so fusion
has two different rankings to merge), the real compiled graph and its extractive generator
(lexical sentence matching, so no embedding model is loaded)."""

from __future__ import annotations

import json

import pytest
from parallel_rag.graph.builder import build_graph, build_graphs
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.generate.node import GenerateNode
from parallel_rag.studio import evaluation
from parallel_rag.studio.evaluation import (
    evaluate,
    index_corpus,
    load_beir,
    ranked_doc_ids,
    run_graph,
    score_runs,
)

CORPUS = {
    "d1": ("Forth Bridge", "The Forth Bridge is a cantilever railway bridge in Scotland."),
    "d2": ("Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889 for the World's Fair."),
    "d3": ("Bananas", "Bananas are rich in potassium and grow in tropical climates."),
    "d4": ("Ada Lovelace", "Ada Lovelace wrote the first algorithm for the Analytical Engine."),
    "d5": ("Golden Gate", "The Golden Gate Bridge opened in 1937 over the strait in California."),
    "d6": ("Tay Bridge", "The Tay railway bridge in Scotland collapsed in a storm in 1879."),
    "d7": ("Brooklyn", "The Brooklyn Bridge, a suspension bridge, opened in New York in 1883."),
    "d8": ("Babbage", "Charles Babbage designed the Analytical Engine, a mechanical computer."),
    "d9": ("Plantains", "Plantains are cooking bananas grown in tropical regions."),
}
QUERIES = {
    "q1": "Which railway bridge crosses the water in Scotland?",
    "q2": "When was the Eiffel Tower finished?",
    "q3": "Who wrote the first algorithm for the Analytical Engine computer?",
    "q4": "bridge opened in 1883 or 1937",
    "q5": "tropical bananas",
}
QRELS = {"q1": ["d1", "d6"], "q2": ["d2"], "q3": ["d4"], "q4": ["d5", "d7"], "q5": ["d3", "d9"]}
MEASURES = ("nDCG@10", "R@100", "P@1")


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beir")
    (folder / "qrels").mkdir()
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as out:
        for doc_id, (title, text) in CORPUS.items():
            out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as out:
        for qid, text in QUERIES.items():
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    rows = "".join(f"{q}\t{d}\t1\n" for q, docs in QRELS.items() for d in docs)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return folder


@pytest.fixture
def config():
    return parse_config(
        {
            "retrievers": [
                {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "a"}},
                {
                    "name": "lexical_flat",
                    "backend": "bm25",
                    "backend_config": {"index_path": "b", "k1": 0.6, "b": 0.2},
                },
            ],
            "generator": {"min_similarity": None},  # lexical sentence matching: no model
        }
    )


@pytest.fixture
def generations(monkeypatch):
    """Counts every ``generate`` node run of graphs built from now on."""
    calls: list[str] = []
    real = GenerateNode.invoke

    def counting(self, state, config):
        calls.append(state["query"])
        return real(self, state, config)

    monkeypatch.setattr(GenerateNode, "invoke", counting)
    return calls


def test_fused_ranking_equals_the_whole_graphs_documents(beir, config, tmp_path, generations):
    collection = load_beir(beir)
    index_corpus(collection.corpus, config, tmp_path)
    graphs = build_graphs(config, base_dir=tmp_path)
    graph = graphs.graph

    runs = run_graph(graphs, collection.queries, 100)
    assert generations == []  # the retrieval path stops at fuse

    for qid, text in collection.queries.items():
        whole = graph.invoke({"query": text, "top_k": 100})
        assert runs[qid] == ranked_doc_ids(whole["documents"])
    assert sum(len(ranking) > 1 for ranking in runs.values()) >= 3  # real lists were fused
    assert len(generations) == len(QUERIES)  # the counter does see a full run


def test_eval_scores_the_fused_list_without_generating(beir, config, tmp_path, generations):
    scores = evaluate(beir, config, tmp_path / "work", measures=MEASURES)
    assert generations == []
    assert set(scores) == {"lexical", "lexical_flat", "fused"}

    collection = load_beir(beir)
    graph = build_graph(config, base_dir=tmp_path / "work")
    whole = {
        qid: ranked_doc_ids(graph.invoke({"query": text, "top_k": 100})["documents"])
        for qid, text in collection.queries.items()
    }
    assert scores["fused"] == score_runs(whole, collection.qrels, MEASURES)


def test_eval_never_runs_the_generator_even_if_it_would_fail(beir, config, tmp_path, monkeypatch):
    def failing(self, state, config):
        raise AssertionError("generation ran during eval")

    monkeypatch.setattr(GenerateNode, "invoke", failing)
    scores = evaluate(beir, config, tmp_path / "work", max_queries=2, measures=["P@1"])
    assert 0 <= scores["fused"]["P@1"] <= 1


def test_fused_depth_beyond_the_graphs_limit_is_capped(beir, config, tmp_path):
    collection = load_beir(beir)
    index_corpus(collection.corpus, config, tmp_path)
    graph = build_graph(config, base_dir=tmp_path)
    deep = run_graph(graph, collection.queries, evaluation.MAX_TOP_K + 50)
    assert deep == run_graph(graph, collection.queries, evaluation.MAX_TOP_K)
