"""``hybrid`` over real backends: an ``external_api`` primary (a loopback Pinecone-format
server) that fails, comes back empty or is slow, with a Qdrant local-mode fallback. The
fallback runs in the graph's ``fallback`` node and the branch record says who served."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backend_servers import (
    BRIDGE_QUESTION,
    TENANT_DOCS,
    LoopbackServer,
    Reply,
    VectorIndex,
    pinecone_route,
)
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.graph import build_graph
from parallel_rag.graph.configuration import ConfigError
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import ingest_paths

pytestmark = pytest.mark.integration
KEY = "pc-test-KEY-77aa11"


class SwitchableAPI:
    """The Pinecone-format server, told per test to answer, fail, return nothing or stall."""

    def __init__(self, index: VectorIndex):
        self.mode = "ok"
        self.real = pinecone_route(index, KEY)

    def __call__(self, request):
        if self.mode == "fail":
            return Reply(503, {"code": 14, "message": "service unavailable"})
        if self.mode == "empty":
            return Reply(200, {"results": [], "matches": [], "namespace": ""})
        reply = self.real(request)
        if self.mode == "slow":
            reply.delay = 1.5
        return reply


@pytest.fixture(scope="module")
def api():
    switch = SwitchableAPI(VectorIndex(load_embeddings(), TENANT_DOCS))
    with LoopbackServer(switch) as server:
        server.switch = switch
        yield server


@pytest.fixture(autouse=True)
def _reset(api):
    api.switch.mode = "ok"


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """Qdrant (the fallback) and BM25 ingested from a corpus whose chunks are marked local."""
    root = tmp_path_factory.mktemp("hybrid")
    corpus = root / "local.jsonl"
    records = [
        {"id": d["id"], "text": d["content"], "metadata": {"tenant": d["tenant"], "copy": "local"}}
        for d in TENANT_DOCS
    ]
    corpus.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    ingest_paths([corpus], parse_config(config_for("http://unused")), root, progress=False)
    return root


def config_for(endpoint: str, strategy: str = "sequential", primary_timeout: float = 5.0):
    return {
        "retrievers": [
            {"name": "lexical", "backend": "bm25"},
            {
                "name": "kb",
                "backend": "hybrid",
                "on_failure": "warn",
                "backend_config": {
                    "strategy": strategy,
                    "primary": {
                        "name": "pinecone",
                        "backend": "external_api",
                        "timeout_seconds": primary_timeout,
                        "backend_config": {
                            "endpoint": endpoint,
                            "request_format": "pinecone",
                            "api_key": KEY,
                        },
                    },
                    "fallback": {
                        "name": "local",
                        "backend": "qdrant",
                        "backend_config": {"collection": "hybrid_local", "path": "qdrant"},
                    },
                },
            },
        ],
        "generator": {"min_similarity": None},
    }


def run(api, base_dir: Path, request: dict | str = BRIDGE_QUESTION, **config_args):
    graph = build_graph(config_for(f"{api.url}/query", **config_args), base_dir=base_dir)
    result = graph.invoke({"query": request} if isinstance(request, str) else request)
    record = next(b for b in result["branches"] if b["retriever"] == "kb")
    kb_docs = [d for d in result["documents"] if any(s["retriever"] == "kb" for s in d["sources"])]
    return result, record, kb_docs


def test_the_compiled_graph_draws_the_fallback(api, base_dir):
    graph = build_graph(config_for(f"{api.url}/query"), base_dir=base_dir)
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    assert {("retrieve", "fallback"), ("fallback", "fuse")} <= edges


def test_primary_with_context_serves(api, base_dir):
    _, record, docs = run(api, base_dir)
    assert (record["status"], record["served_by"], record["fallback_used"]) == (
        "ok",
        "pinecone",
        False,
    )
    assert docs and all("copy" not in d["metadata"] for d in docs)  # the API's documents


def test_failing_primary_is_served_by_the_qdrant_fallback(api, base_dir):
    api.switch.mode = "fail"
    result, record, docs = run(api, base_dir, {"query": BRIDGE_QUESTION, "tenant": "acme"})
    assert record["status"] == "ok" and record["served_by"] == "local"
    assert record["fallback_used"] is True
    assert record["fallback_reason"].startswith("primary failed: BackendRequestError")
    assert "HTTP 503" in record["fallback_reason"] and KEY not in json.dumps(result, default=str)
    assert docs and all(d["metadata"]["copy"] == "local" for d in docs)
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"acme"}


def test_empty_primary_is_served_by_the_fallback(api, base_dir):
    api.switch.mode = "empty"
    _, record, docs = run(api, base_dir)
    assert record["served_by"] == "local"
    assert record["fallback_reason"] == "primary returned no results"
    assert docs and all(d["metadata"]["copy"] == "local" for d in docs)


def test_slow_primary_with_context_is_still_the_one_used_in_parallel(api, base_dir):
    api.switch.mode = "slow"
    _, record, docs = run(api, base_dir, strategy="parallel")
    assert (record["served_by"], record["fallback_used"]) == ("pinecone", False)
    assert record["latency_ms"] >= 1400
    assert docs and all("copy" not in d["metadata"] for d in docs)


@pytest.mark.parametrize("strategy", ["sequential", "parallel"])
def test_primary_slower_than_its_timeout_falls_back(api, base_dir, strategy):
    api.switch.mode = "slow"
    _, record, docs = run(api, base_dir, strategy=strategy, primary_timeout=0.5)
    assert record["served_by"] == "local"
    assert "timed out" in record["fallback_reason"]
    assert docs and all(d["metadata"]["copy"] == "local" for d in docs)


def test_nested_hybrid_and_missing_primary_are_refused():
    nested = config_for("http://x")
    nested["retrievers"][1]["backend_config"]["fallback"] = {"backend": "hybrid"}
    with pytest.raises(ConfigError, match="backend_config.fallback: a hybrid may not nest"):
        parse_config(nested)
    missing = config_for("http://x")
    del missing["retrievers"][1]["backend_config"]["primary"]
    with pytest.raises(ConfigError, match="backend_config.primary: Field required"):
        parse_config(missing)
