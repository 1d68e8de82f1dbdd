"""Fixtures on real parts shared by the integration and reliability suites: the example corpus
ingested with the embedded defaults (packaged MiniLM, Qdrant Edge and BM25 on disk)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
SHARED_DATA = Path(os.environ.get("PARALLEL_RAG_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def example_questions() -> list[dict]:
    lines = (EXAMPLES / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="session")
def example_index(tmp_path_factory):
    """The example corpus ingested with the embedded defaults into a fresh directory."""
    from parallel_rag.graph.loading import load_config
    from parallel_rag.studio.ingestion import ingest_paths

    base_dir = tmp_path_factory.mktemp("example-index")
    config, _ = load_config(None) if not os.environ.get("PARALLEL_RAG_CONFIG") else (None, None)
    report = ingest_paths([EXAMPLES / "corpus"], config, base_dir, progress=False)
    return config, base_dir, report


@pytest.fixture(scope="session")
def example_graph(example_index):
    from parallel_rag.graph.builder import build_graph

    config, base_dir, _ = example_index
    return build_graph(config, base_dir=base_dir)
