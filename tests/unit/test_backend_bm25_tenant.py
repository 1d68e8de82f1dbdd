"""``bm25``: a tenant filter never returns another tenant's document (both engines)."""

from __future__ import annotations

import pytest
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.retriever import BM25Retriever

DOCS = [
    ("acme-bridge", "The Golden Gate Bridge opened in 1937.", {"tenant": "acme"}),
    ("globex-bridge", "The Golden Gate Bridge opened to traffic in 1937.", {"tenant": "globex"}),
    ("acme-comet", "Halley's Comet returns about every 76 years.", {"tenant": "acme"}),
    ("globex-comet", "Halley's Comet is seen every 75 to 79 years.", {"tenant": "globex"}),
]


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_tenant_filter_never_returns_another_tenant(tmp_path, engine):
    BM25Index.from_chunks(DOCS, engine=engine).save(tmp_path / "bm25")
    retriever = BM25Retriever(index_path=str(tmp_path / "bm25"), engine=engine)
    question = "When did the Golden Gate Bridge open?"
    assert {d.metadata["tenant"] for d in retriever.invoke(question, k=4)} == {"acme", "globex"}
    for tenant in ("acme", "globex"):
        docs = retriever.invoke(question, k=4, filters={"tenant": tenant})
        assert [d.id for d in docs] == [f"{tenant}-bridge"]
