"""Fixtures on real parts shared by the integration and reliability suites: the example corpus
ingested with the embedded defaults (packaged MiniLM, Qdrant Edge and BM25 on disk)."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
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
    """The example corpus ingested with the embedded defaults into a fresh directory of this
    test process's own. Under pytest-xdist the corpus is ingested once per session, not once
    per worker (about 9 s of CPU each): the first worker to ask ingests it into the session's
    shared temporary folder under a lock, and every worker copies that into its own directory,
    so a test that writes to its index changes no other worker's."""
    import shutil

    base_dir = tmp_path_factory.mktemp("example-index")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        config, report = _ingest_examples(base_dir)
        return config, base_dir, report
    session_dir = tmp_path_factory.getbasetemp().parent  # this session's, shared by workers
    shared = session_dir / "example-index-shared"
    with open(session_dir / "example-index.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "report.pickle").is_file():
            _, report = _ingest_examples(shared / "index")
            (shared / "report.pickle").write_bytes(pickle.dumps(report))
    shutil.copytree(shared / "index", base_dir, dirs_exist_ok=True)
    report = pickle.loads((shared / "report.pickle").read_bytes())
    return _example_config(), base_dir, report


def _ingest_examples(base_dir: Path):
    """(config, report) of the example corpus ingested into ``base_dir``."""
    from parallel_rag.studio.ingestion import ingest_paths

    config = _example_config()
    report = ingest_paths([EXAMPLES / "corpus"], config, base_dir, progress=False)
    return config, report


def _example_config():
    """The embedded defaults (``None``, which ingest reads as them, under $PARALLEL_RAG_CONFIG)."""
    from parallel_rag.graph.loading import load_config

    return load_config(None)[0] if not os.environ.get("PARALLEL_RAG_CONFIG") else None


@pytest.fixture(scope="session")
def example_graph(example_index):
    from parallel_rag.graph.builder import build_graph

    config, base_dir, _ = example_index
    return build_graph(config, base_dir=base_dir)
