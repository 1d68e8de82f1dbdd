"""``qdrant`` through langchain-qdrant, in Qdrant local mode on disk and in memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from backend_servers import BRIDGE_QUESTION
from parallel_rag.backends.qdrant import retriever as qdrant
from parallel_rag.graph import build_graph
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import ingest_paths
from warm_up_checks import forbid

QdrantEntry = ENTRY_MODELS["qdrant"]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["disk", "memory"])
def ingested(request, tenant_corpus_file, tmp_path_factory):
    base_dir = tmp_path_factory.mktemp(f"qdrant-{request.param}")
    storage = {"path": "qdrant"} if request.param == "disk" else {"location": ":memory:"}
    entry = {
        "name": "dense",
        "backend": "qdrant",
        "backend_config": {"collection": f"tenants_{request.param}", **storage},
    }
    config = parse_config(
        {
            "retrievers": [{"name": "lexical", "backend": "bm25"}, entry],
            "generator": {"min_similarity": None},
        }
    )
    report = ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    assert "dense (qdrant)" in report.indexes
    if request.param == "disk":
        assert (base_dir / "qdrant").is_dir()
    return entry, base_dir, config


def retriever(entry: dict, base_dir: Path, **extra):
    return build_retriever(
        QdrantEntry.model_validate({**entry, **extra}), base_dir, EmbeddingsConfig()
    )


def test_search_returns_ids_content_metadata_and_scores(ingested):
    entry, base_dir, _ = ingested
    docs = retriever(entry, base_dir).invoke(BRIDGE_QUESTION, k=2)
    assert len(docs) == 2 and "Golden Gate" in docs[0].page_content
    assert len(docs[0].id) == 36 and docs[0].metadata["record_id"].endswith("bridge")
    assert 0 < docs[0].metadata["retrieval_score"] <= 1.0001


def test_tenant_filter_never_returns_another_tenant(ingested):
    entry, base_dir, _ = ingested
    dense = retriever(entry, base_dir)
    assert {d.metadata["tenant"] for d in dense.invoke(BRIDGE_QUESTION, k=6)} == {
        "acme",
        "globex",
    }
    for tenant in ("acme", "globex"):
        docs = dense.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": tenant})
        assert len(docs) == 3 and {d.metadata["tenant"] for d in docs} == {tenant}


def test_threshold_is_qdrant_score_threshold(ingested):
    entry, base_dir, _ = ingested
    docs = retriever(entry, base_dir, similarity_threshold=0.5).invoke(BRIDGE_QUESTION, k=6)
    assert docs and len(docs) < 6
    assert all(d.metadata["retrieval_score"] >= 0.5 for d in docs)


def test_warm_up_opens_the_collection_before_the_first_search(ingested, monkeypatch):
    entry, base_dir, _ = ingested
    searcher = retriever(entry, base_dir)
    searcher.warm_up()
    forbid(monkeypatch, qdrant, "shared_client", "a client was opened", wrap=None)
    assert "Golden Gate" in searcher.invoke(BRIDGE_QUESTION, k=2)[0].page_content
    missing = {**entry, "backend_config": {**entry["backend_config"], "collection": "nowhere"}}
    monkeypatch.undo()
    with pytest.raises(LookupError, match="Qdrant collection 'nowhere' does not exist"):
        retriever(missing, base_dir).warm_up()


def test_qdrant_branch_in_the_graph_with_a_tenant(ingested):
    _, base_dir, config = ingested
    result = build_graph(config, base_dir=base_dir).invoke(
        {"query": BRIDGE_QUESTION, "tenant": "acme", "top_k": 3}
    )
    assert {b["status"] for b in result["branches"]} == {"ok"}
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"acme"}
