"""``milvus`` through langchain-milvus, dense and full text (BM25 inside the engine), against a
Milvus Lite file and against a Milvus server (``milvus-lite server``) on loopback that these
tests start and stop by PID."""

from __future__ import annotations

from pathlib import Path

import langchain_milvus
import pytest
from backend_servers import BRIDGE_QUESTION, TENANT_DOCS
from parallel_rag.backends.milvus.stores import forget_stores
from parallel_rag.graph import build_graph
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import ingest_paths
from warm_up_checks import forbid

MilvusEntry = ENTRY_MODELS["milvus"]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["lite-file", "server"])
def milvus_uri(request, tmp_path_factory):
    if request.param == "lite-file":
        return str(tmp_path_factory.mktemp("milvus-lite") / "milvus.db")
    return request.getfixturevalue("milvus_server")


def milvus_config(uri: str, collection: str = "tenant_docs", **extra) -> dict:
    return {
        "name": "vectors",
        "backend": "milvus",
        "backend_config": {"collection": collection, "uri": uri, **extra},
    }


def pipeline(uri: str, base_dir: Path, **milvus_extra):
    return parse_config(
        {
            "retrievers": [
                {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "bm25"}},
                milvus_config(uri, **milvus_extra),
            ],
            "generator": {"min_similarity": None},
        }
    )


@pytest.fixture(scope="module")
def ingested(milvus_uri, tenant_corpus_file, tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("milvus-base")
    config = pipeline(milvus_uri, base_dir)
    report = ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    assert "vectors (milvus)" in report.indexes
    return milvus_uri, base_dir, config


def retriever(uri: str, base_dir: Path, **entry_extra):
    entry = MilvusEntry.model_validate({**milvus_config(uri), **entry_extra})
    return build_retriever(entry, base_dir, EmbeddingsConfig())


def test_search_returns_ids_content_metadata_and_cosine_scores(ingested):
    uri, base_dir, _ = ingested
    docs = retriever(uri, base_dir).invoke(BRIDGE_QUESTION, k=3)
    assert len(docs) == 3
    assert "Golden Gate" in docs[0].page_content
    assert docs[0].metadata["record_id"] in {"acme-bridge", "globex-bridge"}
    assert len(docs[0].id) == 36  # the chunk's UUID, the same id every index uses
    scores = [d.metadata["retrieval_score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1.0001
    assert "vector" not in docs[0].metadata and "pk" not in docs[0].metadata


def test_tenant_filter_never_returns_another_tenant(ingested):
    uri, base_dir, _ = ingested
    vectors = retriever(uri, base_dir)
    assert {d.metadata["tenant"] for d in vectors.invoke(BRIDGE_QUESTION, k=6)} == {
        "acme",
        "globex",
    }
    for tenant in ("acme", "globex"):
        docs = vectors.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": tenant})
        assert len(docs) == 3 and {d.metadata["tenant"] for d in docs} == {tenant}


def test_similarity_threshold_is_applied(ingested):
    uri, base_dir, _ = ingested
    docs = retriever(uri, base_dir, similarity_threshold=0.5).invoke(BRIDGE_QUESTION, k=6)
    assert docs and all(d.metadata["retrieval_score"] >= 0.5 for d in docs)
    assert len(docs) < 6


def test_filter_expression_is_anded_with_the_request_filters(ingested):
    uri, base_dir, _ = ingested
    entry = milvus_config(uri)
    entry["backend_config"]["filter_expression"] = 'record_id != "acme-bridge"'
    vectors = build_retriever(MilvusEntry.model_validate(entry), base_dir, EmbeddingsConfig())
    docs = vectors.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": "acme"})
    assert {d.metadata["record_id"] for d in docs} == {"acme-comet", "acme-unix"}


def test_reingesting_replaces_chunks_instead_of_duplicating(ingested, tenant_corpus_file):
    uri, base_dir, config = ingested
    ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    docs = retriever(uri, base_dir).invoke(BRIDGE_QUESTION, k=50)
    assert len(docs) == len(TENANT_DOCS) and len({d.id for d in docs}) == len(TENANT_DOCS)


def test_json_metadata_field_layout(milvus_uri, tenant_corpus_file, tmp_path):
    config = pipeline(milvus_uri, tmp_path, collection="json_meta", metadata_field="metadata")
    ingest_paths([tenant_corpus_file], config, tmp_path, progress=False)
    entry = milvus_config(milvus_uri, collection="json_meta", metadata_field="metadata")
    vectors = build_retriever(MilvusEntry.model_validate(entry), tmp_path, EmbeddingsConfig())
    docs = vectors.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": "globex"})
    assert len(docs) == 3 and {d.metadata["tenant"] for d in docs} == {"globex"}
    assert all(len(d.id) == 36 for d in docs)


def test_milvus_branch_in_the_graph(ingested):
    uri, base_dir, config = ingested
    graph = build_graph(config, base_dir=base_dir)
    result = graph.invoke({"query": BRIDGE_QUESTION, "tenant": "globex", "top_k": 3})
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "lexical": "ok",
        "vectors": "ok",
    }
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"globex"}
    both = [d for d in result["documents"] if len(d["sources"]) == 2]
    assert both, "bm25 and milvus share chunk ids, so fusion merges their hits"


def test_warm_up_connects_before_the_first_search(ingested, monkeypatch):
    uri, base_dir, _ = ingested
    forget_stores(uri)  # no connection left open by earlier tests
    searcher = retriever(uri, base_dir)
    searcher.warm_up()
    forbid(monkeypatch, langchain_milvus, "Milvus", "a connection was opened", wrap=None)
    assert "Golden Gate" in searcher.invoke(BRIDGE_QUESTION, k=3)[0].page_content
    monkeypatch.undo()
    with pytest.raises(LookupError, match="Milvus collection 'nowhere' does not exist"):
        retriever(uri, base_dir, **milvus_config(uri, collection="nowhere")).warm_up()


def test_missing_collection_is_a_branch_error(milvus_uri, tmp_path):
    config = parse_config(
        {
            "retrievers": [
                milvus_config(milvus_uri, collection="nowhere"),
                {**milvus_config(milvus_uri, collection="nowhere_else"), "name": "v2"},
            ],
            "generator": {"min_similarity": None},
        }
    )
    result = build_graph(config, base_dir=tmp_path).invoke({"query": "anything"})
    assert {b["status"] for b in result["branches"]} == {"failed"}
    assert "Milvus collection 'nowhere' does not exist" in " ".join(result["warnings"])


def test_a_server_connection_sent_away_while_idle_is_opened_again_once(
    milvus_server, tenant_corpus_file, tmp_path, monkeypatch
):
    """pymilvus reuses one channel per server; a channel the server sent away while idle
    (``too_many_pings``) fails its recovery once with CONNECT_FAILED: the store opens again."""
    from parallel_rag.backends.milvus import stores as milvus_stores
    from pymilvus.exceptions import MilvusException

    check = milvus_stores._check_existing_collection
    calls = []

    def sent_away_once(settings, args):
        calls.append(args["uri"])
        if len(calls) == 1:
            raise MilvusException(code=2, message="Fail connecting to server: Too many pings")
        return check(settings, args)

    forget_stores(milvus_server)
    monkeypatch.setattr(milvus_stores, "_check_existing_collection", sent_away_once)
    config = pipeline(milvus_server, tmp_path, collection="sent_away")
    ingest_paths([tenant_corpus_file], config, tmp_path, progress=False)
    assert calls[:2] == [milvus_server, milvus_server]
    searcher = retriever(milvus_server, tmp_path, **milvus_config(milvus_server, "sent_away"))
    assert "Golden Gate" in searcher.invoke(BRIDGE_QUESTION, k=3)[0].page_content


# ------------------------------------------------------------------------------- full text


def full_text_config(uri: str, collection: str = "tenant_words", **extra) -> dict:
    return {
        "name": "words",
        "backend": "milvus",
        "backend_config": {"collection": collection, "uri": uri, "search": "full_text", **extra},
    }


@pytest.fixture(scope="module")
def full_text_ingested(milvus_uri, tenant_corpus_file, tmp_path_factory):
    """Both branches on Milvus, written by one ingest: full text and dense, two collections."""
    base_dir = tmp_path_factory.mktemp("milvus-full-text")
    config = parse_config(
        {
            "retrievers": [
                full_text_config(milvus_uri),
                milvus_config(milvus_uri, collection="tenant_vectors"),
            ],
            "generator": {"min_similarity": None},
        }
    )
    report = ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    assert {"words (milvus)", "vectors (milvus)"} <= set(report.indexes)
    return milvus_uri, base_dir, config


def words(uri: str, base_dir: Path, **backend_config):
    entry = MilvusEntry.model_validate(full_text_config(uri, **backend_config))
    return build_retriever(entry, base_dir, EmbeddingsConfig())


def test_full_text_finds_keyword_matches_only_with_bm25_scores(full_text_ingested):
    uri, base_dir, _ = full_text_ingested
    searcher = words(uri, base_dir)
    docs = searcher.invoke("1937", k=6)
    assert {d.metadata["record_id"] for d in docs} == {"acme-bridge", "globex-bridge"}
    scores = [d.metadata["retrieval_score"] for d in docs]
    assert all(s > 0 for s in scores) and scores == sorted(scores, reverse=True)
    assert [d.metadata["record_id"] for d in searcher.invoke("Ritchie Thompson", k=6)] == [
        "acme-unix"
    ]
    assert searcher.invoke("xylophone", k=6) == []  # dense would rank every chunk
    assert len(docs[0].id) == 36 and "sparse" not in docs[0].metadata


def test_full_text_tenant_filter_and_filter_expression(full_text_ingested):
    uri, base_dir, _ = full_text_ingested
    query = "Golden Gate Bridge Halley's Comet 1969 ENIAC"
    for tenant in ("acme", "globex"):
        docs = words(uri, base_dir).invoke(query, k=6, filters={"tenant": tenant})
        assert len(docs) == 3 and {d.metadata["tenant"] for d in docs} == {tenant}
    narrowed = words(uri, base_dir, filter_expression='record_id != "acme-bridge"')
    docs = narrowed.invoke(query, k=6, filters={"tenant": "acme"})
    assert {d.metadata["record_id"] for d in docs} == {"acme-comet", "acme-unix"}


def test_full_text_and_dense_branches_in_one_graph(full_text_ingested):
    uri, base_dir, config = full_text_ingested
    result = build_graph(config, base_dir=base_dir).invoke(
        {"query": BRIDGE_QUESTION, "tenant": "globex", "top_k": 3}
    )
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "words": "ok",
        "vectors": "ok",
    }
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"globex"}
    both = [d for d in result["documents"] if len(d["sources"]) == 2]
    assert both, "both collections hold the same chunk ids, so fusion merges their hits"


def test_full_text_reingest_replaces_chunks(full_text_ingested, tenant_corpus_file):
    uri, base_dir, config = full_text_ingested
    ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    docs = words(uri, base_dir).invoke("Golden Gate Comet Unix ENIAC", k=50)
    assert len(docs) == len(TENANT_DOCS) and len({d.id for d in docs}) == len(TENANT_DOCS)


def test_a_collection_written_for_one_search_is_refused_by_the_other(full_text_ingested):
    uri, base_dir, _ = full_text_ingested
    with pytest.raises(ValueError, match="has no BM25 function writing 'sparse'"):
        words(uri, base_dir, collection="tenant_vectors").warm_up()
    with pytest.raises(ValueError, match="has no vector field 'vector'.*search: full_text"):
        retriever(uri, base_dir, **milvus_config(uri, collection="tenant_words")).warm_up()


def test_milvus_server_killed_fails_its_branch_by_its_policy_and_the_other_answers(
    tenant_corpus_file, tmp_path
):
    """A Milvus server of its own, killed after the ingest: the full-text branch fails (warn:
    a warning; block: the run is refused) while the local BM25 branch still answers."""
    import sys

    from parallel_rag.nodes.failure_policy import BlockedError
    from servers import ServerProcess, free_port

    port = free_port()
    server = ServerProcess(
        [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(tmp_path / "data")]
        + ["--host", "127.0.0.1", "--port", str(port)],
        log_path=tmp_path / "milvus.log",
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        server.wait_for_port(port, 60)

        def config(policy: str):
            words = {**full_text_config(uri), "on_failure": policy, "timeout_seconds": 15}
            lexical = {
                "name": "lexical",
                "backend": "bm25",
                "backend_config": {"index_path": "bm25"},
            }
            return parse_config(
                {"retrievers": [words, lexical], "generator": {"min_similarity": None}}
            )

        ingest_paths([tenant_corpus_file], config("warn"), tmp_path, progress=False)
        server.stop(grace=5)
        forget_stores(uri)
        result = build_graph(config("warn"), base_dir=tmp_path).invoke({"query": BRIDGE_QUESTION})
        assert {b["retriever"]: b["status"] for b in result["branches"]} == {
            "words": "failed",
            "lexical": "ok",
        }
        assert result["documents"] and "words" in " ".join(result["warnings"])
        with pytest.raises(BlockedError, match="words"):
            build_graph(config("block"), base_dir=tmp_path).invoke({"query": BRIDGE_QUESTION})
    finally:
        server.stop(grace=5)
        forget_stores(uri)
