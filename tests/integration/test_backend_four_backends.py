"""examples/four-backends.yaml: BM25, Qdrant, Milvus Lite and a hybrid (external_api primary,
Qdrant fallback) in one graph, ingested and asked through the CLI's code paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from backend_servers import LoopbackServer, elasticsearch_route
from parallel_rag.graph import build_graph
from parallel_rag.graph.loading import load_config
from parallel_rag.nodes.prompts import INSUFFICIENT_EVIDENCE
from parallel_rag.studio.cli import main
from servers import free_port

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "four-backends.yaml"
CORPUS = REPO_ROOT / "examples" / "corpus"
QUESTION = "Which algorithm did Ada Lovelace publish for the Analytical Engine?"


def test_the_example_uses_four_different_backends():
    config, base_dir = load_config(EXAMPLE)
    assert base_dir == EXAMPLE.parent
    assert [e.backend for e in config.retrievers] == ["bm25", "qdrant", "milvus", "hybrid"]
    hybrid = config.retrievers[3].backend_config
    assert (hybrid.primary.backend, hybrid.fallback.backend) == ("external_api", "qdrant")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The example config copied into a fresh directory and the example corpus ingested."""
    root = tmp_path_factory.mktemp("four-backends")
    config_file = root / "four-backends.yaml"
    config_file.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["--config", str(config_file), "ingest", "--quiet", str(CORPUS)]) == 0
    assert (root / ".parallel-rag" / "milvus.db").exists()
    return root, yaml.safe_load(config_file.read_text(encoding="utf-8"))


def with_endpoint(root: Path, data: dict, endpoint: str) -> Path:
    data["retrievers"][3]["backend_config"]["primary"]["backend_config"]["endpoint"] = endpoint
    path = root / f"four-backends-{abs(hash(endpoint))}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_unreachable_search_service_is_covered_by_the_fallback(workspace):
    root, data = workspace
    config = with_endpoint(root, data, f"http://127.0.0.1:{free_port()}/docs/_search")
    result = build_graph(config).invoke({"query": QUESTION})
    branches = {b["retriever"]: b for b in result["branches"]}
    assert {name: b["status"] for name, b in branches.items()} == {
        "lexical": "ok",
        "dense": "ok",
        "milvus": "ok",
        "kb": "ok",
    }
    kb = branches["kb"]
    assert (kb["served_by"], kb["fallback_used"]) == ("local-vectors", True)
    assert kb["fallback_reason"].startswith("primary failed: BackendRequestError")
    assert result["answer"] != INSUFFICIENT_EVIDENCE
    top = result["documents"][0]
    assert {s["retriever"] for s in top["sources"]} >= {"dense", "milvus", "kb"}
    assert "ada-lovelace" in top["metadata"]["source"]


def test_search_service_answering_serves_the_hybrid(workspace):
    root, data = workspace
    docs = [
        {"id": p.stem, "content": p.read_text(encoding="utf-8"), "tenant": "public"}
        for p in sorted(CORPUS.glob("*.md"))
    ]
    with LoopbackServer(elasticsearch_route(docs, "docs", "unused")) as server:
        config_data = yaml.safe_load(yaml.safe_dump(data))
        primary = config_data["retrievers"][3]["backend_config"]["primary"]["backend_config"]
        primary.update(api_key="unused")
        config = with_endpoint(root, config_data, f"{server.url}/docs/_search")
        result = build_graph(config).invoke({"query": QUESTION, "top_k": 100})
    kb = next(b for b in result["branches"] if b["retriever"] == "kb")
    assert (kb["status"], kb["served_by"], kb["fallback_used"]) == ("ok", "search-service", False)
    # every fused document (top_k 100): the service's whole-file hits rank below the chunks
    # that three other branches agree on, but they are all there
    kb_ranks = {
        d["id"]: s["rank"]
        for d in result["documents"]
        for s in d["sources"]
        if s["retriever"] == "kb"
    }
    assert kb_ranks.get("ada-lovelace") == 1  # the service's own document ids and ranking
