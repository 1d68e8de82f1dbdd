"""Every command on a router file (``examples/router.yaml``, copied beside its index): the real
``parallel-rag`` command in a subprocess, resolving the file through the one resolver.
``ingest`` writes the top-level pipeline, ``ask`` answers from it (or from ``--route NAME``'s
pipeline), ``route`` previews the route with its fusion, ``eval`` scores the pipeline, ``mcp``
serves it to an MCP client over stdio, and ``serve`` serves it under ``/rag`` beside the
router's ``/v1`` (``running_serve``: 127.0.0.1, stopped by its PID)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from app_servers import running_serve
from mcp import Client, StdioServerParameters
from servers import BIN

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUESTION = "Which algorithm did Ada Lovelace publish?"
SECONDS = 300  # a command loads the embedding model before it answers


def env() -> dict[str, str]:
    values = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    values.pop("PARALLEL_RAG_CONFIG", None)
    return values


def cli(directory: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(BIN / "parallel-rag"), "--config", "router.yaml", *args]
    return subprocess.run(
        command, cwd=directory, env=env(), capture_output=True, text=True, timeout=SECONDS
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """examples/router.yaml in a fresh folder, its top-level pipeline ingested by the CLI."""
    directory = tmp_path_factory.mktemp("router-file")
    shutil.copy(EXAMPLES / "router.yaml", directory / "router.yaml")
    done = cli(directory, "ingest", str(EXAMPLES / "corpus"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "bm25" in done.stdout and "qdrant_edge" in done.stdout, done.stdout
    return directory


def asked(directory: Path, *options: str) -> dict:
    done = cli(directory, "ask", QUESTION, "--json", "--no-progress", *options)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_ask_answers_from_the_top_level_pipeline(workspace):
    result = asked(workspace)
    assert {b["retriever"] for b in result["branches"]} == {"lexical", "dense"}
    assert all(b["status"] == "ok" for b in result["branches"]), result["branches"]
    assert "ada-lovelace" in result["documents"][0]["metadata"]["source"]


def test_ask_route_answers_from_that_routes_pipeline(workspace):
    result = asked(workspace, "--route", "edge-docs")
    assert [b["retriever"] for b in result["branches"]] == ["qdrant_edge"]
    assert result["documents"], result
    refused = cli(workspace, "ask", QUESTION, "--route", "chat")
    assert refused.returncode == 1 and "--route: route 'chat'" in refused.stderr


def test_route_previews_the_route_and_its_fusion(workspace):
    done = cli(workspace, "route", "How does BM25 rank documents?")
    assert done.returncode == 0, done.stderr
    preview = json.loads(done.stdout)
    assert (preview["route"], preview["reason"]) == ("docs", "keyword")
    assert preview["plan"]["fusion"] == {
        "method": "minmax",
        "dense_weight": 0.75,
        "weights": {"lexical": 1.0, "dense": 0.75},
        "source": "configuration",  # router.yaml's docs route says its fusion: no fit applies
    }


def test_eval_scores_the_router_files_pipeline(workspace, tmp_path):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {
        "ada": "Ada Lovelace published the first algorithm for the Analytical Engine.",
        "forth": "The Forth Bridge is a cantilever railway bridge in Scotland.",
    }
    lines = [json.dumps({"_id": i, "title": "", "text": t}) for i, t in docs.items()]
    (beir / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    query = json.dumps({"_id": "q", "text": "Who published the first algorithm?"})
    (beir / "queries.jsonl").write_text(query + "\n", encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tada\t1\n")
    done = cli(workspace, "eval", str(beir), "--workdir", str(tmp_path / "work"), "--json")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"lexical", "dense", "fused", "fusion"}


async def test_mcp_serves_the_router_files_pipeline(workspace):
    expected = asked(workspace, "--top-k", "3")
    parameters = StdioServerParameters(
        command=str(BIN / "parallel-rag"),
        args=["--config", "router.yaml", "mcp"],
        env=env(),
        cwd=workspace,
    )

    async def run() -> list:
        async with Client(parameters, read_timeout_seconds=120) as client:
            found = await client.call_tool("search", {"query": QUESTION, "top_k": 3})
            assert not found.is_error, found.content
            return found.structured_content["documents"]

    documents = await asyncio.wait_for(run(), SECONDS)
    assert [d["id"] for d in documents] == [d["id"] for d in expected["documents"]]


def test_serve_serves_the_pipeline_under_rag_beside_the_routes(workspace):
    with running_serve(workspace / "router.yaml", workspace) as (_, base):
        models = httpx.get(f"{base}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["auto", "docs", "edge-docs", "chat"]
        answer = httpx.post(
            f"{base}/rag/invoke", json={"input": {"query": QUESTION, "top_k": 3}}, timeout=120
        )
        assert answer.status_code == 200, answer.text
        branches = answer.json()["output"]["branches"]
        assert {b["retriever"] for b in branches} == {"lexical", "dense"}
