"""The cluster recipe's Milvus killed and restarted under two running replicas: a
``milvus-lite server`` that this module starts on a data directory it owns (so it can SIGKILL it
by PID and start it again on the same directory and port), both branches on it (full text and
dense), two ``parallel-rag serve`` replicas on one config.

A restarted ``milvus-lite server`` brings its collections back *released*; each replica's
cached store must load them again by itself, say so once in its log, and read an outage as its
own one-line failures, not pymilvus's tracebacks (``backends/milvus/outages.py``). The last
test pins down why a one-file ingest scores low on Milvus Lite's full text (docs/cluster.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from app_servers import running_serve
from parallel_rag.backends.milvus.stores import forget_stores
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import ingest_paths
from servers import ServerProcess, free_port

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
QUESTION = "Who designed the Analytical Engine?"
MILVUS_START_TIMEOUT = 60
RECOVERY_TRIES = 60  # asks per replica after the restart, POLL_SECONDS apart
POLL_SECONDS = 0.5
RELOADED = "reloaded after server restart"


class RestartableMilvus:
    """``milvus-lite server`` on one data directory and port, killed and started again."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.starts = 0
        self.server: ServerProcess | None = None

    def start(self) -> None:
        self.starts += 1
        command = [sys.executable, "-m", "milvus_lite", "server"]
        command += ["--data-dir", str(self.directory / "data")]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.server = ServerProcess(command, log_path=self.directory / f"milvus-{self.starts}.log")
        self.server.wait_for_port(self.port, MILVUS_START_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL to the server's PID: no shutdown, as when its machine or container dies."""
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.process.wait(timeout=30)
        self.server.stop()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=15)


@pytest.fixture(scope="module")
def milvus(tmp_path_factory):
    server = RestartableMilvus(tmp_path_factory.mktemp("milvus-restart"))
    server.start()
    yield server
    forget_stores(server.uri)
    server.stop()


def retrievers(uri: str) -> list[dict]:
    return [
        {
            "name": "words",
            "backend": "milvus",
            "backend_config": {"collection": "restart_text", "uri": uri, "search": "full_text"},
        },
        {
            "name": "vectors",
            "backend": "milvus",
            "backend_config": {"collection": "restart_vectors", "uri": uri},
        },
    ]


def ask(base: str) -> dict:
    body = {"input": {"query": QUESTION, "top_k": 3}}
    response = httpx.post(f"{base}/rag/invoke", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["output"]


def statuses(result: dict) -> dict[str, str]:
    return {b["retriever"]: b["status"] for b in result["branches"]}


def recovered(result: dict) -> bool:
    return bool(result["documents"]) and set(statuses(result).values()) == {"ok"}


@pytest.fixture(scope="module")
def replicas(milvus, tmp_path_factory):
    """Two serve replicas, each in its own folder, on one config; the corpus ingested once."""
    directory = tmp_path_factory.mktemp("replicas")
    config = {"retrievers": retrievers(milvus.uri), "generator": {"min_similarity": None}}
    ingest_paths([CORPUS], parse_config(config), directory, progress=False)
    with contextlib.ExitStack() as stack:
        found = []
        for name in ("a", "b"):
            workdir = directory / name
            workdir.mkdir()
            (workdir / "cluster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
            found.append(stack.enter_context(running_serve(workdir / "cluster.yaml", workdir)))
        yield found


def test_replicas_get_their_evidence_back_after_milvus_is_killed_and_restarted(milvus, replicas):
    for _, base in replicas:
        assert recovered(ask(base))

    milvus.kill()
    for _, base in replicas:  # down: 200s with each branch's failure said, no evidence
        down = ask(base)
        assert down["documents"] == []
        assert statuses(down) == {"words": "failed", "vectors": "failed"}
        assert any("retriever 'words' failed" in w for w in down["warnings"])

    milvus.start()
    for server, base in replicas:
        for _ in range(RECOVERY_TRIES):
            result = ask(base)
            if recovered(result):
                break
            time.sleep(POLL_SECONDS)
        assert recovered(result), (result["warnings"], server.log()[-3000:])
        assert result["documents"][0]["metadata"]["source"].endswith("ada-lovelace.md")

    # the first replica asked loads each collection and says so; the other finds it loaded
    lines = [line for server, _ in replicas for line in server.log().splitlines()]
    for collection in ("restart_text", "restart_vectors"):
        said = [line for line in lines if RELOADED in line and f"'{collection}'" in line]
        assert len(said) == 1, said
    for server, _ in replicas:
        log = server.log()
        # the outage in the replica's own words, one line a failure; pymilvus's tracebacks
        # (its ERROR "RPC error: [search] ... Traceback:" and its recovery warnings) stay out
        assert "retriever 'words' failed (on_failure=warn)" in log
        assert "Traceback" not in log, log[-3000:]
        assert "RPC error" not in log and "Connection recovery failed" not in log


SEGMENTS_TEXT = {
    "name": "words",
    "backend": "milvus",
    "backend_config": {"collection": "segments_text", "search": "full_text"},
}


def top_hit(uri: str, base_dir: Path, query: str):
    entry = {**SEGMENTS_TEXT, "backend_config": {**SEGMENTS_TEXT["backend_config"], "uri": uri}}
    retriever = build_retriever(
        ENTRY_MODELS["milvus"].model_validate(entry), base_dir, EmbeddingsConfig()
    )
    return retriever.invoke(query, k=1)[0]


def test_a_one_file_ingest_is_scored_on_its_own_segment_until_milvus_lite_compacts(
    milvus, tmp_path
):
    """Milvus Lite scores BM25 with each segment's own statistics: a file ingested alone is a
    one-document segment, its rare word's IDF that of one document, until the engine's
    background compaction merges four small segments (docs/cluster.md says what to do)."""
    entry = {**SEGMENTS_TEXT, "backend_config": {**SEGMENTS_TEXT["backend_config"]}}
    entry["backend_config"]["uri"] = milvus.uri
    local = {"name": "local", "backend": "bm25", "backend_config": {"index_path": "bm25"}}
    config = parse_config({"retrievers": [entry, local], "generator": {"min_similarity": None}})
    ingest_paths([CORPUS], config, tmp_path, progress=False)
    notes = tmp_path / "notes"
    notes.mkdir()
    note = notes / "quillfeather.md"
    note.write_text(
        "# Quillfeather\n\nThe mineral zanzibarite was first described by Ottoline "
        "Quillfeather in 1911.\n",
        encoding="utf-8",
    )
    ingest_paths([note], config, tmp_path, progress=False)
    alone = top_hit(milvus.uri, tmp_path, "Quillfeather")
    assert alone.metadata["source"].endswith("quillfeather.md")
    assert alone.metadata["retrieval_score"] < 0.5  # one document's IDF

    for i in range(3):  # three more one-file segments: four under 1 MB, compacted into one
        extra = notes / f"extra-{i}.md"
        extra.write_text(f"# Extra {i}\n\nA note about granite {i}.\n", encoding="utf-8")
        ingest_paths([extra], config, tmp_path, progress=False)
    for _ in range(RECOVERY_TRIES):  # compaction runs on the server's background thread
        merged = top_hit(milvus.uri, tmp_path, "Quillfeather")
        if merged.metadata["retrieval_score"] > 5:
            break
        time.sleep(POLL_SECONDS)
    assert merged.id == alone.id
    assert merged.metadata["retrieval_score"] > 5  # the whole collection's IDF
