"""The ``embedding`` scorer on the real parts: BM25 on disk, Qdrant local mode, packaged MiniLM.

The hand-made case where lexical matching is fooled: a keyword-stuffed, off-topic passage that
BM25 ranks first drops below the relevant passage once the branch is reranked by MiniLM cosine.
"""

from __future__ import annotations

import pytest
from parallel_rag.graph import ConfigError, build_graph
from parallel_rag.graph.components import make_retriever, make_scorer
from parallel_rag.graph.configuration import RerankerConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.rerank.scorers import (
    EmbeddingSimilarityScorer,
    QueryOverBudgetError,
    TokenBudgetError,
)
from parallel_rag.studio.evaluation import index_corpus, ranked_doc_ids

pytestmark = pytest.mark.integration

QUERY = "How do bees make honey?"
PASSAGES = {
    "relevant": "Worker bees gather nectar from flowers and carry it back to the hive, where they "
    "pass it mouth to mouth and fan it with their wings until most of the water evaporates; the "
    "thick syrup is sealed in wax cells as the colony's winter food.",
    "stuffed": "Honey Bees honey bees HONEY BEES: the Honey Bees make it big! Honey Bees tour "
    "2024, how the Honey Bees make music, Honey Bees tickets, Honey Bees merchandise and Honey "
    "Bees fan club news.",
    "volcano": "Volcanoes erupt when magma rises through cracks in the crust and gas pressure "
    "forces it out at the surface.",
    "markets": "Stock markets fell sharply as investors worried that central banks would raise "
    "interest rates again.",
    "tides": "Ocean tides are caused by the gravitational pull of the Moon and, to a lesser "
    "degree, the Sun.",
    "bread": "Bakers make bread rise by adding yeast, which ferments sugars and releases carbon "
    "dioxide into the dough.",
}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("stuffing")
    config = parse_config(
        {
            "retrievers": [
                {"name": "lexical", "backend": "bm25", "top_k": 6},
                {"name": "dense", "backend": "qdrant", "top_k": 6,
                 "backend_config": {"collection": "stuffing"}},
            ],
            "reranker": {"kind": "embedding"},
        }
    )  # fmt: skip
    corpus = {doc_id: {"title": "", "text": text} for doc_id, text in PASSAGES.items()}
    index_corpus(corpus, config, base_dir)
    return config, base_dir


def lexical_sources(result) -> dict[str, dict]:
    found = {}
    for doc in result["documents"]:
        for source in doc["sources"]:
            if source["retriever"] == "lexical":
                found[doc["metadata"]["doc_id"]] = source
    return found


def test_keyword_stuffed_passage_drops_below_the_relevant_one(indexed):
    config, base_dir = indexed
    bm25 = make_retriever(config.retrievers[0], config, base_dir)
    lexical_order = ranked_doc_ids(bm25.invoke(QUERY))
    assert lexical_order[0] == "stuffed"  # BM25 is fooled by the repeated query words
    assert lexical_order.index("relevant") > 0

    result = build_graph(config, base_dir=base_dir).invoke({"query": QUERY, "top_k": 6})
    lexical = lexical_sources(result)
    assert lexical["relevant"]["rank"] == 1
    assert lexical["stuffed"]["rank"] > lexical["relevant"]["rank"]
    assert lexical["relevant"]["rerank_score"] > lexical["stuffed"]["rerank_score"]
    bm25_scores = {
        doc.metadata["doc_id"]: doc.metadata["retrieval_score"] for doc in bm25.invoke(QUERY)
    }
    assert {k: s["score"] for k, s in lexical.items()} == pytest.approx(bm25_scores)  # intact
    assert result["documents"][0]["metadata"]["doc_id"] == "relevant"
    assert all(branch["rerank_ms"] > 0 for branch in result["branches"])


def test_scorer_loads_the_model_once_per_process(indexed):
    from parallel_rag.backends.encoders import embeddings as embeddings

    first = make_scorer(RerankerConfig(kind="embedding"))
    loads = embeddings._load.cache_info().misses
    second = make_scorer(RerankerConfig(kind="embedding", top_k=3))
    assert embeddings._load.cache_info().misses == loads  # shared with the dense retriever too
    assert first.limit == second.limit == 256  # all-MiniLM-L6-v2's max_seq_length
    texts = [PASSAGES["relevant"], PASSAGES["relevant"], PASSAGES["tides"]]
    scores = first.score(QUERY, texts)
    assert scores[0] == scores[1] and scores == pytest.approx(second.score(QUERY, texts))


def test_budget_counts_each_text_with_special_tokens():
    scorer = EmbeddingSimilarityScorer().prepare()
    assert scorer.count_tokens(["bees make honey"]) == [5]  # [CLS] bees make honey [SEP]
    assert scorer.score("bees", ["bees make honey"])  # fits
    tight = EmbeddingSimilarityScorer(max_tokens=4).prepare()
    with pytest.raises(TokenBudgetError, match=r"rank 1 \(5 tokens\)"):
        tight.score("bees", ["bees make honey"])
    with pytest.raises(QueryOverBudgetError):
        tight.score("how do bees make honey", ["bees"])


def test_reject_refuses_text_the_model_would_silently_cut():
    long = PASSAGES["relevant"] + " " + " ".join(["nectar"] * 260)
    scorer = EmbeddingSimilarityScorer().prepare()
    with pytest.raises(TokenBudgetError, match="exceed max_tokens 256"):
        scorer.score(QUERY, [PASSAGES["tides"], long])


def test_truncate_keeps_the_longest_prefix_that_fits():
    long = PASSAGES["relevant"] + " " + " ".join(["nectar"] * 260)
    truncating = EmbeddingSimilarityScorer(max_tokens=32, overflow="truncate").prepare()
    prefix = truncating._truncate(long, 32)
    assert long.startswith(prefix) and truncating.count_tokens([prefix]) == [32]
    exact = EmbeddingSimilarityScorer(max_tokens=32).prepare()
    assert truncating.score(QUERY, [long]) == pytest.approx(exact.score(QUERY, [prefix]))


def test_max_tokens_above_the_model_limit_is_a_config_error():
    with pytest.raises(ConfigError, match="reranker.max_tokens: 257 is more than"):
        make_scorer(RerankerConfig(kind="embedding", max_tokens=257))
