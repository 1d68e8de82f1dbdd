"""``vectorstore``: the project's own managed stores, created and updated by
``parallel-rag ingest --store NAME`` and selected by ``vector_store_id``, on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from backend_servers import BRIDGE_QUESTION, TENANT_DOCS
from parallel_rag.backends.shared.revisions import CURRENT_FILE
from parallel_rag.backends.vectorstore import retriever as vectorstore
from parallel_rag.backends.vectorstore.retriever import VectorStoreSettings, open_store
from parallel_rag.graph import build_graph
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.studio.cli import main
from tenant_fixtures import write_tenant_jsonl
from warm_up_checks import forbid

VectorStoreEntry = ENTRY_MODELS["vectorstore"]

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A config with a vectorstore branch, and two corpus files ingested with --store."""
    root = tmp_path_factory.mktemp("vectorstore")
    (root / "corpus").mkdir()
    bridges = write_tenant_jsonl(root / "corpus" / "bridges.jsonl", TENANT_DOCS[:2])
    others = write_tenant_jsonl(root / "corpus" / "others.jsonl", TENANT_DOCS[2:])
    config = {
        "retrievers": [
            {"name": "lexical", "backend": "bm25"},
            {"name": "kb", "backend": "vectorstore", "backend_config": {"vector_store_id": "kb"}},
        ],
        "generator": {"min_similarity": None},
    }
    config_file = root / "parallel-rag.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    code = main(
        ["--config", str(config_file), "ingest", "--store", "kb", "--quiet", str(root / "corpus")]
    )
    assert code == 0
    return root, config_file, bridges, others


def kb(root: Path, **settings) -> object:
    entry = VectorStoreEntry.model_validate(
        {"backend": "vectorstore", "backend_config": {"vector_store_id": "kb", **settings}}
    )
    return build_retriever(entry, root, EmbeddingsConfig())


def test_ingest_store_creates_a_named_store_on_disk(workspace):
    root, *_ = workspace
    directory = VectorStoreSettings(vector_store_id="kb").store_dir(root)
    revision = (directory / CURRENT_FILE).read_text().strip()
    manifest = json.loads((directory / revision / "manifest.json").read_text())
    assert manifest["id"] == "kb" and manifest["chunks"] == len(TENANT_DOCS)
    assert manifest["embedding"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert manifest["dimension"] == 384 and len(manifest["files"]) == 2
    assert (directory / revision / "vectors.npy").is_file()
    assert not (root / ".parallel-rag" / "bm25").exists()  # --store writes that store only


def test_search_ids_content_metadata_scores(workspace):
    root, *_ = workspace
    docs = kb(root).invoke(BRIDGE_QUESTION, k=2)
    assert len(docs) == 2 and {d.metadata["record_id"] for d in docs} == {
        "acme-bridge",
        "globex-bridge",
    }
    assert len(docs[0].id) == 36 and 0 < docs[0].metadata["retrieval_score"] <= 1.0001


def test_tenant_filter_never_returns_another_tenant(workspace):
    root, *_ = workspace
    store = kb(root)
    assert {d.metadata["tenant"] for d in store.invoke(BRIDGE_QUESTION, k=6)} == {
        "acme",
        "globex",
    }
    for tenant in ("acme", "globex"):
        docs = store.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": tenant})
        assert len(docs) == 3 and {d.metadata["tenant"] for d in docs} == {tenant}


def test_file_ids_restrict_the_search(workspace):
    root, _, bridges, _ = workspace
    store = open_store(VectorStoreSettings(vector_store_id="kb").store_dir(root))
    bridge_file = next(
        fid for fid, f in store.manifest["files"].items() if "bridges" in f["source"]
    )
    docs = kb(root, file_ids=[bridge_file]).invoke("Halley's Comet", k=6)
    assert {d.metadata["record_id"] for d in docs} == {"acme-bridge", "globex-bridge"}


def test_threshold(workspace):
    root, *_ = workspace
    docs = kb(root).model_copy(update={"score_threshold": 0.5}).invoke(BRIDGE_QUESTION, k=6)
    assert docs and len(docs) < 6 and all(d.metadata["retrieval_score"] >= 0.5 for d in docs)


def test_vectorstore_branch_in_the_graph(workspace):
    root, config_file, *_ = workspace
    assert main(["--config", str(config_file), "ingest", "--quiet", str(root / "corpus")]) == 0
    result = build_graph(config_file).invoke({"query": BRIDGE_QUESTION, "tenant": "globex"})
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "lexical": "ok",
        "kb": "ok",
    }
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"globex"}


def test_updating_replaces_a_files_chunks_and_keeps_the_others(workspace, tmp_path):
    root, config_file, bridges, _ = workspace
    store_dir = VectorStoreSettings(vector_store_id="kb").store_dir(root)
    before = (store_dir / CURRENT_FILE).read_text()
    changed = [dict(TENANT_DOCS[0], content="The Golden Gate Bridge was repainted in 2025.")]
    write_tenant_jsonl(bridges, changed)
    try:
        assert main(["--config", str(config_file), "ingest", "--store", "kb", str(bridges)]) == 0
        store = open_store(store_dir)
        assert (store_dir / CURRENT_FILE).read_text() != before
        assert store.manifest["chunks"] == len(TENANT_DOCS) - 1
        texts = " ".join(store.contents)
        assert "repainted in 2025" in texts and "opened to traffic" not in texts
        assert "Halley" in texts  # the other file's chunks are kept
        revisions = [p for p in store_dir.iterdir() if p.name.startswith("rev-")]
        assert len(revisions) <= 2
    finally:
        write_tenant_jsonl(bridges, TENANT_DOCS[:2])
        main(["--config", str(config_file), "ingest", "--store", "kb", "--quiet", str(bridges)])


def test_missing_store_is_a_clear_error(workspace):
    root, *_ = workspace
    entry = VectorStoreEntry.model_validate(
        {"backend": "vectorstore", "backend_config": {"vector_store_id": "nope"}}
    )
    with pytest.raises(LookupError, match="ingest --store nope"):
        build_retriever(entry, root, EmbeddingsConfig()).invoke("q")


def test_warm_up_reads_the_store_before_the_first_search(workspace, monkeypatch):
    root, *_ = workspace
    vectorstore._cache.clear()  # nothing read by earlier tests
    retriever = kb(root)
    retriever.warm_up()
    forbid(monkeypatch, vectorstore.ManagedVectorStore, "load", "the store was read", classmethod)
    assert "Golden Gate" in retriever.invoke(BRIDGE_QUESTION)[0].page_content
    entry = VectorStoreEntry.model_validate(
        {"backend": "vectorstore", "backend_config": {"vector_store_id": "nope"}}
    )
    with pytest.raises(LookupError, match="ingest --store nope"):  # what a search would say
        build_retriever(entry, root, EmbeddingsConfig()).warm_up()


def test_store_refuses_another_embedding_model(workspace):
    root, *_ = workspace
    entry = VectorStoreEntry.model_validate(
        {"backend": "vectorstore", "backend_config": {"vector_store_id": "kb"}}
    )
    other = build_retriever(entry, root, EmbeddingsConfig(model="some/other-model"))
    with pytest.raises(ValueError, match="was built with sentence-transformers/all-MiniLM-L6-v2"):
        other.invoke("q")


def test_the_installed_command_accepts_store(tmp_path):
    """The real console command, as a user runs it."""
    corpus = write_tenant_jsonl(tmp_path / "docs.jsonl", TENANT_DOCS[:3])
    command = [
        str(Path(sys.executable).with_name("parallel-rag")),
        "ingest",
        "--store",
        "cli-store",
        "--quiet",
        str(corpus),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "vector store cli-store" in done.stdout
    assert (tmp_path / ".parallel-rag" / "vector_stores" / "cli-store" / CURRENT_FILE).is_file()
