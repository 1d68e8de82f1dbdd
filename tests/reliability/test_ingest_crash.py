"""``parallel-rag ingest`` killed with SIGKILL halfway, then run again: every index (BM25, Qdrant
local mode, Milvus Lite) ends with every chunk exactly once, none half-written, and all of them
agree on the set of chunk ids. Running the same ingest once more changes nothing.

Each case is a real ``parallel-rag ingest`` in a subprocess: it ingests half of a corpus sample,
then ingests all of it and kills itself with SIGKILL at one precise point of the write (a hook
wrapped around the store call, so the kill lands in the middle of writing, not before or
after). The test process then re-runs the ingest and inspects the stores.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.milvus.settings import MilvusSettings
from parallel_rag.backends.milvus.stores import open_store
from parallel_rag.backends.qdrant.retriever import QdrantSettings, shared_client
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.loading import load_config
from parallel_rag.studio.cli import main
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.ingestion.chunk import load_chunks

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
FILES = sorted(CORPUS.glob("*.md"))[:10]
FIRST_HALF = FILES[:5]
CONFIG = {
    "retrievers": [
        {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "idx/bm25"}},
        {
            "name": "dense",
            "backend": "qdrant",
            "backend_config": {"collection": "docs", "path": "idx/qdrant"},
        },
        {
            "name": "milvus",
            "backend": "milvus",
            "backend_config": {"collection": "docs", "uri": "idx/milvus.db"},
        },
    ]
}
# Run in the subprocess: ingest the first half cleanly, arm the kill, ingest everything.
CRASHING_INGEST = """
import os, signal, sys
from parallel_rag.studio.cli import main

config, point, first, everything = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
assert main(["--config", config, "ingest", *first.split(os.pathsep), "--quiet"]) == 0


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if point == "bm25-between-renames":
    # the old index has been moved aside, the new one is not in place yet
    real_rename = os.rename

    def rename(src, dst):
        real_rename(src, dst)
        if ".old-" in os.fspath(dst):
            die()

    os.rename = rename
elif point == "qdrant-mid-upsert":
    from parallel_rag.backends.qdrant import retriever as qdrant
    from qdrant_client import QdrantClient

    qdrant.write_chunks.__kwdefaults__["batch_size"] = 4
    real_upsert, calls = QdrantClient.upsert, []

    def upsert(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            die()
        return real_upsert(self, *args, **kwargs)

    QdrantClient.upsert = upsert
elif point == "milvus-mid-insert":
    from langchain_milvus import Milvus
    from parallel_rag.backends.milvus import writes as milvus_writes

    milvus_writes.write_chunks.__kwdefaults__["batch_size"] = 4
    real_add, calls = Milvus.add_embeddings, []

    def add_embeddings(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            die()
        return real_add(self, *args, **kwargs)

    Milvus.add_embeddings = add_embeddings
main(["--config", config, "ingest", *everything.split(os.pathsep), "--quiet"])
sys.exit(3)  # reaching this line means the kill point was never hit
"""


def expected_chunks(files: list[Path]) -> dict[str, str]:
    return {c.id: c.content for path in files for c in load_chunks(path)}


def bm25_chunks(base: Path) -> list[tuple[str, str]]:
    return [(c.id, c.content) for c in BM25Index.load(base / "idx/bm25").chunks]


def qdrant_points(base: Path) -> list[tuple[str, str, tuple[float, ...]]]:
    settings = QdrantSettings(collection="docs", path="idx/qdrant")
    client = shared_client(settings.connection_key(base))
    points, _ = client.scroll("docs", limit=100_000, with_payload=True, with_vectors=True)
    return sorted((str(p.id), p.payload["content"], tuple(p.vector)) for p in points)


def milvus_rows(base: Path) -> list[tuple[str, str, str]]:
    settings = MilvusSettings(collection="docs", uri="idx/milvus.db")
    client = open_store(settings, base, "bundled", "cpu").client
    rows = client.query("docs", filter='pk != ""', output_fields=["pk", "content", "file_id"])
    return sorted((r["pk"], r["content"], r["file_id"]) for r in rows)


def ingest(base: Path) -> None:
    code = main(["--config", str(base / "parallel-rag.yaml"), "ingest", *map(str, FILES)])
    assert code == 0


def check_consistent(base: Path) -> None:
    expected = expected_chunks(FILES)
    bm25 = bm25_chunks(base)
    qdrant = qdrant_points(base)
    milvus = milvus_rows(base)
    for name, ids in [
        ("bm25", [i for i, _ in bm25]),
        ("qdrant", [i for i, *_ in qdrant]),
        ("milvus", [i for i, *_ in milvus]),
    ]:
        duplicates = [i for i, n in collections.Counter(ids).items() if n > 1]
        assert not duplicates, f"{name} holds chunks more than once: {duplicates[:5]}"
        assert set(ids) == set(expected), f"{name} disagrees on the chunk ids"
    # none half-written: every chunk's text is the whole chunk, in every index
    assert dict(bm25) == expected
    assert {i: text for i, text, _ in qdrant} == expected
    assert {i: text for i, text, _ in milvus} == expected
    assert all(len(vector) == 384 for *_, vector in qdrant)


@pytest.mark.parametrize(
    "kill_point", ["bm25-between-renames", "qdrant-mid-upsert", "milvus-mid-insert"]
)
def test_ingest_killed_halfway_then_rerun_is_consistent_and_idempotent(
    tmp_path, monkeypatch, kill_point
):
    (tmp_path / "parallel-rag.yaml").write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            CRASHING_INGEST,
            str(tmp_path / "parallel-rag.yaml"),
            kill_point,
            os.pathsep.join(map(str, FIRST_HALF)),
            os.pathsep.join(map(str, FILES)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]
    if kill_point == "bm25-between-renames":
        assert not (tmp_path / "idx/bm25").exists()  # the kill left no index in place

    monkeypatch.chdir(tmp_path)  # chunk metadata names sources relative to the cwd
    ingest(tmp_path)
    check_consistent(tmp_path)
    assert not list((tmp_path / "idx").glob(".bm25.old-*"))  # the moved-aside index was used

    # the same files again: nothing changes (vectors to the bit), nothing is even written
    bm25_files = {p: p.stat().st_mtime_ns for p in (tmp_path / "idx/bm25").rglob("*")}
    before = (bm25_chunks(tmp_path), qdrant_points(tmp_path), milvus_rows(tmp_path))
    report = ingest_paths(FILES, load_config(tmp_path / "parallel-rag.yaml")[0], tmp_path)
    assert report.embedded == 0
    assert (
        report.unchanged
        == report.indexes
        == ["lexical (bm25)", "dense (qdrant)", "milvus (milvus)"]
    )
    after = (bm25_chunks(tmp_path), qdrant_points(tmp_path), milvus_rows(tmp_path))
    assert after == before
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "idx/bm25").rglob("*")} == bm25_files

    result = build_graph(tmp_path / "parallel-rag.yaml").invoke(
        {"query": "Who wrote the first algorithm for the Analytical Engine?"}
    )
    assert {b["retriever"]: b["status"] for b in result["branches"]} == {
        "lexical": "ok",
        "dense": "ok",
        "milvus": "ok",
    }


def test_reingest_embeds_and_writes_only_the_files_that_changed(tmp_path, monkeypatch):
    """One edited file among ten: only its chunks are embedded and rewritten; every index
    still agrees and the other files' points are untouched, vectors to the bit."""
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in FILES:
        (corpus / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "parallel-rag.yaml").write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    config = load_config(tmp_path / "parallel-rag.yaml")[0]
    first = ingest_paths([corpus], config, tmp_path, progress=False)
    assert first.embedded == first.chunks and first.unchanged == []
    before = {p[0]: p for p in qdrant_points(tmp_path)}

    edited = sorted(corpus.glob("*.md"))[3]
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA sentence added later.\n")
    edited_chunks = load_chunks(edited)
    second = ingest_paths([corpus], config, tmp_path, progress=False)
    assert second.embedded == len(edited_chunks)
    assert second.unchanged == []  # every index had that file to rewrite
    after = {p[0]: p for p in qdrant_points(tmp_path)}
    edited_ids = {c.id for c in edited_chunks}
    assert {i: p for i, p in after.items() if i not in edited_ids} == {
        i: p for i, p in before.items() if i not in edited_ids
    }
    assert any("A sentence added later." in after[i][1] for i in edited_ids)
    milvus = {pk: text for pk, text, _ in milvus_rows(tmp_path)}
    assert {i: p[1] for i, p in after.items()} == milvus == dict(bm25_chunks(tmp_path))

    settings = QdrantSettings(collection="docs", path="idx/qdrant")
    shared_client(settings.connection_key(tmp_path)).delete_collection("docs")  # index lost
    third = ingest_paths([corpus], config, tmp_path, progress=False)
    assert third.unchanged == ["lexical (bm25)", "milvus (milvus)"]
    assert third.embedded == third.chunks  # the lost index is rebuilt whole
    assert {p[0] for p in qdrant_points(tmp_path)} == set(milvus)
