"""Quality floor on SciFact (test split): fused BM25 + dense beats each retriever alone, at the
shipped fusion defaults (a configuration with no ``fusion:`` block).

Small data on purpose (tests assert quality floors, benchmarks measure): the corpus is every
document judged for the 300 test queries plus a fixed random sample of distractors, so the
embedding pass fits in CI. ``bench/`` reports the full-corpus figures
(``bench/FUSION-RESULTS.md`` for the fusion methods).

The fused rankings come from the retrieval graph (``build_retrieval_graph``, as ``parallel-rag
eval`` scores it): the answer graph would also run the extractive generator over every fused
document, minutes of work the measures never read. Each query's fused top 100 is taken once and
scored at both depths: nDCG@10 reads its first 10, which are the ranking a ``top_k`` 10 request
returns (fusion ranks the same branch candidates, whatever ``top_k`` cuts them to).

The corpus is embedded on the ``torch`` extra's document encoder for a CPU without AMX,
``int8`` (``backends/encoders/embeddings.py``: per-channel int8 weights, int8 activations),
with float32 queries: it is what a full install indexes with on such a CPU, so the floor holds
there too, and it encodes the 1,483 abstracts in about half the CPU of the core install's
float32 graph (the suite's other tests embed on that one). The figures are within a few
thousandths of the float32 ones (dense nDCG@10 0.750 against 0.751, fused 0.815 against 0.814,
fused R@100 0.983 both).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from parallel_rag.backends.encoders.embeddings import (
    DOCUMENT_ENCODER_ENV,
    RUNTIME_ENV,
    load_embeddings,
)
from parallel_rag.graph.builder import build_retrieval_graph
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.evaluation import (
    index_corpus,
    load_beir,
    run_graph,
    run_retriever,
    score_runs,
    single_retrievers,
)

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
SHARED_DATA = Path(os.environ.get("PARALLEL_RAG_DATA", REPO_ROOT.parent / "shared" / "data"))
DISTRACTORS = 1200
CANDIDATES = 100
MEASURES = ["nDCG@10", "R@100"]


@pytest.fixture(scope="module")
def scifact_subset():
    collection = load_beir(SHARED_DATA / "scifact", split="test")
    judged = {doc for rels in collection.qrels.values() for doc in rels}
    others = sorted(set(collection.corpus) - judged)
    keep = judged | set(random.Random(13).sample(others, DISTRACTORS))
    collection.corpus = {k: v for k, v in collection.corpus.items() if k in keep}
    return collection


@pytest.fixture(scope="module")
def indexed(scifact_subset, tmp_path_factory):
    """The subset indexed once for BM25 and Qdrant (the config has no ``fusion:`` block), each
    retriever's scores alone, and the fused top ``CANDIDATES`` of every query."""
    base_dir = tmp_path_factory.mktemp("scifact")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(RUNTIME_ENV, "torch")
        env.setenv(DOCUMENT_ENCODER_ENV, "int8")
        assert load_embeddings().documents_on_int8  # not a fallback to float32
        return _index_and_rank(scifact_subset, base_dir)


def _index_and_rank(scifact_subset, base_dir: Path):
    config = parse_config(
        {
            "retrievers": [
                {"name": "lexical", "backend": "bm25", "top_k": CANDIDATES},
                {
                    "name": "dense",
                    "backend": "qdrant",
                    "top_k": CANDIDATES,
                    "backend_config": {"collection": "scifact"},
                },
            ],
            # retrieval quality is under test: keep the answer step lexical (cheap)
            "generator": {"kind": "extractive", "min_similarity": None},
        }
    )
    index_corpus(scifact_subset.corpus, config, base_dir)
    singles = {}
    for name, retriever in single_retrievers(config, base_dir).items():
        runs = run_retriever(retriever, scifact_subset.queries, CANDIDATES)
        singles[name] = score_runs(runs, scifact_subset.qrels, MEASURES)
    graph = build_retrieval_graph(config, base_dir=base_dir)
    fused = run_graph(graph, scifact_subset.queries, CANDIDATES)
    return singles, score_runs(fused, scifact_subset.qrels, MEASURES)


def test_fused_ndcg_beats_each_single_retriever(scifact_subset, indexed):
    singles, fused = indexed
    figures = {name: measures["nDCG@10"] for name, measures in singles.items()}
    figures["fused"] = fused["nDCG@10"]
    print(
        f"\nSciFact test ({len(scifact_subset.queries)} queries, {len(scifact_subset.corpus)} docs)"
        f" nDCG@10: bm25={figures['lexical']:.4f} dense={figures['dense']:.4f} "
        f"fused={figures['fused']:.4f}"
    )
    assert figures["fused"] > figures["lexical"]
    assert figures["fused"] > figures["dense"]
    assert figures["lexical"] > 0.55 and figures["dense"] > 0.55


def test_fused_recall_at_100_is_not_below_either_retriever(scifact_subset, indexed):
    singles, fused = indexed
    print(
        "\nSciFact subset R@100: "
        + " ".join(f"{name}={m['R@100']:.4f}" for name, m in singles.items())
        + f" fused={fused['R@100']:.4f} (fused nDCG@10 {fused['nDCG@10']:.4f})"
    )
    for name, measures in singles.items():
        assert fused["R@100"] >= measures["R@100"], name
        assert fused["nDCG@10"] >= measures["nDCG@10"], name
