"""A folder of PDF, HTML, DOCX, PPTX and CSV files written by real writers, ingested with the
embedded defaults (packaged MiniLM, Qdrant Edge, BM25), answers with page-cited sources: in
``parallel-rag ask`` (a subprocess), in the graph's ``RAGResult`` and in the MCP tools' results
(the SDK's client on the server in memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from document_files import (
    CHROME_WORDS,
    write_csv,
    write_docx,
    write_encrypted_pdf,
    write_html,
    write_pdf,
    write_pptx,
)

pytestmark = pytest.mark.integration

QUESTION = "How often should the impeller seal be replaced?"


def mixed_folder(root: Path) -> Path:
    folder = root / "docs"
    write_pdf(folder / "manual.pdf")
    write_html(folder / "garden.html")
    write_docx(folder / "bike.docx")
    write_pptx(folder / "deck.pptx")
    write_csv(folder / "faq.csv")
    return folder


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "parallel_rag.studio.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_ingests_a_mixed_folder_and_cites_the_pdf_page(tmp_path):
    mixed_folder(tmp_path)
    ingest = cli(["ingest", "docs", "--quiet"], tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    assert "ingested 5 file(s)" in ingest.stdout
    ask = cli(["ask", QUESTION, "--no-progress"], tmp_path)
    assert ask.returncode == 0, ask.stderr
    cited = [line for line in ask.stdout.splitlines() if line.startswith(" *[")]
    assert cited and f"{Path('docs') / 'manual.pdf'} p. 3  (fused" in cited[0]
    assert "2000" in ask.stdout.split("Sources:")[0]


def test_cli_bad_file_is_one_line_and_skip_bad_files_lists_it(tmp_path):
    mixed_folder(tmp_path)
    locked = write_encrypted_pdf(tmp_path / "docs" / "locked.pdf")
    before = sorted(tmp_path.rglob("*"))
    refused = cli(["ingest", "docs", "--quiet"], tmp_path)
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert f"{Path('docs') / locked.name}: encrypted PDF" in refused.stderr
    assert "nothing was ingested" in refused.stderr
    assert sorted(tmp_path.rglob("*")) == before  # no index written
    skipped = cli(["ingest", "docs", "--quiet", "--skip-bad-files"], tmp_path)
    assert skipped.returncode == 0, skipped.stderr
    assert "ingested 5 file(s)" in skipped.stdout
    assert f"skipped {Path('docs') / locked.name}: encrypted PDF" in skipped.stderr


@pytest.fixture(scope="module")
def document_graph(tmp_path_factory):
    from parallel_rag.graph.builder import build_graphs
    from parallel_rag.graph.loading import load_config
    from parallel_rag.studio.ingestion import ingest_paths

    base_dir = tmp_path_factory.mktemp("documents")
    config, _ = load_config(None)
    ingest_paths([mixed_folder(base_dir)], config, base_dir, progress=False)
    return build_graphs(config, base_dir=base_dir)


def test_rag_result_citations_carry_page_slide_and_section(document_graph):
    graph = document_graph.graph
    result = graph.invoke({"query": QUESTION, "top_k": 4})
    first = result["citations"][0]
    assert first["source"].endswith("manual.pdf") and first["page"] == 3
    slides = graph.invoke({"query": "How many engineers will be hired?", "top_k": 4})
    assert {"slide": 2} | slides["citations"][0] == slides["citations"][0]
    garden = graph.invoke({"query": "How often should tomatoes be watered?"})
    assert garden["citations"][0]["section"] == "Growing tomatoes"
    for doc in garden["documents"]:
        assert not [w for w in CHROME_WORDS if w in doc["content"]]


async def test_mcp_tools_results_carry_the_page(document_graph):
    from mcp import Client
    from parallel_rag.studio.mcp_server import build_server

    async with Client(build_server(document_graph)) as client:
        asked = await client.call_tool("ask", {"query": QUESTION, "top_k": 3})
        searched = await client.call_tool("search", {"query": QUESTION, "top_k": 3})
    answer = json.loads(asked.content[0].text)
    assert answer["citations"][0]["page"] == 3
    documents = json.loads(searched.content[0].text)["documents"]
    assert documents[0]["metadata"]["page"] == 3
