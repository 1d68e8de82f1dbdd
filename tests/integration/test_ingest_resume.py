"""A ``parallel-rag ingest`` killed (SIGKILL) after some of its batches, run again, skips the
batches already written: it embeds only the rest, and every index ends with every chunk once.
The ingest runs in a subprocess with a hook that kills it right after its second batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.qdrant.retriever import QdrantSettings, shared_client
from parallel_rag.graph.loading import load_config
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.ingestion.chunk import load_chunks

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
FILES = sorted(CORPUS.glob("*.md"))[:8]
BATCH_CHUNKS = 3
CONFIG = {
    "retrievers": [
        {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "idx/bm25"}},
        {
            "name": "dense",
            "backend": "qdrant",
            "backend_config": {"collection": "docs", "path": "idx/qdrant"},
        },
    ]
}
KILLED_AFTER_TWO_BATCHES = """
import os, signal, sys
from parallel_rag.studio.ingestion import pipeline
from parallel_rag.studio.cli import main

pipeline.INGEST_BATCH_CHUNKS = int(sys.argv[2])
real_write_batch, done = pipeline.write_batch, []


def write_batch(chunks, *args):
    written = real_write_batch(chunks, *args)
    done.append(sorted({c.metadata["file_id"] for c in chunks}))
    if len(done) == 2:
        print("\\n".join(s for batch in done for s in batch), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return written


pipeline.write_batch = write_batch
main(["--config", sys.argv[1], "ingest", *sys.argv[3:], "--quiet"])
sys.exit(3)  # reaching this line means the kill never happened
"""


def test_a_killed_ingest_rerun_skips_the_batches_already_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # sources (in the chunk hashes) are named as the killed run did
    config_path = tmp_path / "parallel-rag.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_TWO_BATCHES, str(config_path), str(BATCH_CHUNKS)]
        + [str(f) for f in FILES],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    written_files = set(killed.stdout.split())
    assert 2 <= len(written_files) < len(FILES)

    config, base_dir = load_config(config_path)
    report = ingest_paths(FILES, config, base_dir, progress=False, batch_chunks=BATCH_CHUNKS)
    chunks = [c for path in FILES for c in load_chunks(path)]
    rest = [c for c in chunks if c.metadata["file_id"] not in written_files]
    assert (
        0 < report.embedded == len(rest) < len(chunks)
    )  # the batches written before the kill: not again
    expected = {c.id: c.content for c in chunks}
    bm25 = [(c.id, c.content) for c in BM25Index.load(base_dir / "idx/bm25").chunks]
    client = shared_client(
        QdrantSettings(collection="docs", path="idx/qdrant").connection_key(base_dir)
    )
    points, _ = client.scroll("docs", limit=10_000, with_payload=True)
    for held in (bm25, [(str(p.id), p.payload["content"]) for p in points]):
        assert len(held) == len(expected) and dict(held) == expected
