"""Faults: backends that are down, hang, answer 500/503, answer malformed JSON, answer 5 MiB
against the 4 MiB cap, drop the connection mid-response, or reset it; and embedded stores held
by another process.

Each fault is served by a loopback server on 127.0.0.1 behind an ``external_api`` branch
(``remote``) of a three-branch pipeline whose other branches (BM25 on disk and a healthy
``external_api`` service) work. Every request must finish within its timeout, the faulty
branch's record must say exactly what happened, the fused list must hold everything the healthy
branches found (the same list as a run without the faulty branch), and ``on_failure`` decides
the outcome. The servers count the attempts: transient faults are retried, the rest are not.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from backend_servers import BRIDGE_QUESTION, TENANT_DOCS, LoopbackServer, custom_route
from parallel_rag.backends.base import StoreInUseError
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.loading import load_config
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.prompts import INSUFFICIENT_EVIDENCE
from parallel_rag.studio.cli import main
from parallel_rag.studio.ingestion import ingest_paths
from scripted_server import ScriptedServer, answer, resets
from servers import ServerProcess, free_port

pytestmark = pytest.mark.integration

API_KEY = "fault-test-key-0123456789"
TEMPLATE = '{"q": "{{query}}", "k": {{top_k}}, "filters": {{filters}}}'
FOUR_MIB = 4 * 1024 * 1024
MAX_RETRIES = 2
HOLDER_START_TIMEOUT = 120


# ------------------------------------------------------------------------------- fault server


def streams_past_the_cap(conn: socket.socket, stop: threading.Event) -> None:
    """5 MiB of JSON, chunked (no Content-Length): the cap must stop the read."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    piece = b"x" * 65536
    chunks = [b'{"results": ["'] + [piece] * 80 + [b'"]}']
    for chunk in chunks:
        if stop.is_set():
            return
        conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    conn.sendall(b"0\r\n\r\n")


def dies_mid_response(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 4000\r\nConnection: close\r\n\r\n{"resu')


def hangs(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(60)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/search"


# ------------------------------------------------------------------------------- pipeline


@pytest.fixture(scope="module")
def healthy_service():
    with LoopbackServer(custom_route(TENANT_DOCS, API_KEY)) as server:
        yield server


def remote_entry(name: str, endpoint: str, **backend: object) -> dict:
    return {
        "name": name,
        "backend": "external_api",
        "backend_config": {
            "endpoint": endpoint,
            "request_format": "custom",
            "request_template": TEMPLATE,
            "api_key": API_KEY,
            "content_field": "text",
            "max_retries": MAX_RETRIES,
            **backend,
        },
    }


def pipeline(tenant_bm25_dir: Path, healthy: str, faulty: str, **faulty_entry: object) -> dict:
    backend = faulty_entry.pop("backend_config", {})
    return {
        "retrievers": [
            {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "bm25"}},
            remote_entry("remote-ok", f"{healthy}/search"),
            {**remote_entry("remote", faulty, **backend), **faulty_entry},
        ],
        "generator": {"kind": "extractive", "min_similarity": None},  # no model needed
    }


def run(tenant_bm25_dir, healthy_service, faulty_url, **entry) -> tuple[dict, float]:
    graph = build_graph(
        pipeline(tenant_bm25_dir, healthy_service.url, faulty_url, **entry),
        base_dir=tenant_bm25_dir,
    )
    started = time.monotonic()
    result = graph.invoke({"query": BRIDGE_QUESTION, "top_k": 20})
    return result, time.monotonic() - started


@pytest.fixture(scope="module")
def reference(tenant_bm25_dir, healthy_service) -> dict:
    """The same request with the faulty branch switched off (the ``retrievers`` knob)."""
    graph = build_graph(
        pipeline(tenant_bm25_dir, healthy_service.url, closed_port_url()), base_dir=tenant_bm25_dir
    )
    knobs = {"configurable": {"retrievers": ["lexical", "remote-ok"]}}
    return graph.invoke({"query": BRIDGE_QUESTION, "top_k": 20}, knobs)


def branch(result: dict, name: str) -> dict:
    (record,) = [b for b in result["branches"] if b["retriever"] == name]
    return record


def assert_degraded_gracefully(result: dict, reference: dict, error: str) -> None:
    record = branch(result, "remote")
    assert record["status"] == "failed" and record["hits"] == 0
    assert error in record["error"], record["error"]
    assert API_KEY not in json.dumps(result, default=str)
    assert branch(result, "lexical")["status"] == "ok"
    assert branch(result, "remote-ok")["status"] == "ok"
    # everything the healthy branches found is in the fused list, ranked as without the fault
    assert [d["id"] for d in result["documents"]] == [d["id"] for d in reference["documents"]]
    assert result["answer"] == reference["answer"] and result["citations"]
    (warning,) = result["warnings"]  # on_failure defaults to warn
    assert warning.startswith("retriever 'remote' failed") and error in warning


CAP = f"exceeds max_response_bytes ({FOUR_MIB}"
FAULTS = {
    # name: (server action, backend settings, expected error, attempts, seconds at most)
    "http-500": (answer(500, b'{"error": "boom"}'), {}, "HTTP 500", 1, 10),
    "http-503": (
        answer(503, b"unavailable"),
        {},
        f"HTTP 503 X: unavailable (after {MAX_RETRIES + 1} attempts)",
        MAX_RETRIES + 1,
        10,
    ),
    "http-502-no-retries": (
        answer(502, b"bad gateway"),
        {"max_retries": 0},
        "HTTP 502",
        1,
        10,
    ),
    "http-401": (answer(401, b'{"detail": "no"}'), {}, "HTTP 401", 1, 10),
    "malformed-json": (answer(200, b"{results: [oops"), {}, "returned malformed JSON", 1, 10),
    "wrong-shape": (answer(200, b'{"hits": []}'), {}, "missing field 'results'", 1, 10),
    "5MiB-declared": (
        answer(200, b'{"results": ["' + b"x" * (5 * 1024 * 1024) + b'"]}'),
        {},
        CAP,
        1,
        20,
    ),
    "5MiB-streamed": (streams_past_the_cap, {}, CAP, 1, 20),
    "dies-mid-response": (
        dies_mid_response,
        {},
        f"RemoteProtocolError: peer closed connection without sending complete message body "
        f"(received 6 bytes, expected 4000) (after {MAX_RETRIES + 1} attempts)",
        MAX_RETRIES + 1,
        10,
    ),
    "connection-reset": (resets, {}, f"(after {MAX_RETRIES + 1} attempts)", MAX_RETRIES + 1, 10),
    "hangs": (hangs, {"timeout_seconds": 1.5}, "timed out (ReadTimeout)", 1, 6),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulty_backend_is_recorded_and_never_costs_the_other_branches(
    tenant_bm25_dir, healthy_service, reference, fault
):
    action, backend, error, attempts, seconds = FAULTS[fault]
    with ScriptedServer(action) as server:
        result, elapsed = run(
            tenant_bm25_dir, healthy_service, server.url, backend_config=backend, timeout_seconds=30
        )
        seen = server.attempts
    assert_degraded_gracefully(result, reference, error)
    assert seen == attempts
    assert elapsed < seconds


def test_a_backend_that_is_down_is_retried_then_recorded(
    tenant_bm25_dir, healthy_service, reference
):
    result, elapsed = run(tenant_bm25_dir, healthy_service, closed_port_url())
    assert_degraded_gracefully(result, reference, "ConnectError")
    assert f"(after {MAX_RETRIES + 1} attempts)" in branch(result, "remote")["error"]
    assert elapsed < 10


def test_the_branch_timeout_bounds_a_hang_the_backend_would_wait_out(
    tenant_bm25_dir, healthy_service, reference
):
    with ScriptedServer(hangs) as server:
        result, elapsed = run(
            tenant_bm25_dir,
            healthy_service,
            server.url,
            backend_config={"timeout_seconds": 60},
            timeout_seconds=1,
        )
    assert_degraded_gracefully(result, reference, "timed out after 1s")
    assert elapsed < 6


def test_on_failure_decides_the_outcome(tenant_bm25_dir, healthy_service, reference):
    down = closed_port_url()
    skipped, _ = run(tenant_bm25_dir, healthy_service, down, on_failure="skip")
    assert (
        branch(skipped, "remote")["status"] == "failed"
        and "ConnectError" in (branch(skipped, "remote")["error"])
    )
    assert skipped["warnings"] == []
    assert [d["id"] for d in skipped["documents"]] == [d["id"] for d in reference["documents"]]

    with pytest.raises(BlockedError) as raised:
        run(tenant_bm25_dir, healthy_service, down, on_failure="block")
    assert raised.value.component == "retriever 'remote'" and "ConnectError" in str(raised.value)
    assert API_KEY not in str(raised.value)


def test_when_every_branch_fails_the_answer_is_the_insufficient_evidence_sentence(tmp_path):
    down = closed_port_url()
    config = {
        "retrievers": [
            {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "none"}},
            remote_entry("remote-ok", down, max_retries=0),
            remote_entry("remote", down, max_retries=0),
        ],
        "generator": {"kind": "extractive", "min_similarity": None},
    }
    result = build_graph(config, base_dir=tmp_path).invoke({"query": BRIDGE_QUESTION})
    assert result["answer"] == INSUFFICIENT_EVIDENCE
    assert result["documents"] == [] and result["citations"] == []
    assert {b["status"] for b in result["branches"]} == {"failed"}
    assert len(result["warnings"]) == 3


# ------------------------------------------------------------------------------- embedded stores

HOLD_QDRANT = """
import sys, time
from qdrant_client import QdrantClient
client = QdrantClient(path=sys.argv[1])
print("ready", flush=True)
time.sleep(300)
"""
HOLD_MILVUS = """
import sys, time
from pymilvus import MilvusClient
client = MilvusClient(uri=sys.argv[1])
print("ready", flush=True)
time.sleep(300)
"""


class Holder(ServerProcess):
    """Another process holding an embedded store's path (stopped by its PID)."""

    def __init__(self, script: str, path: Path):
        super().__init__(
            [sys.executable, "-c", script, str(path)], log_path=path.parent / "holder.log"
        )

    def __enter__(self) -> Holder:
        self.wait_for_output("ready", HOLDER_START_TIMEOUT)  # the store is open
        return self


def store_config(directory: Path, dense: dict) -> Path:
    config = {
        "retrievers": [
            {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "idx/bm25"}},
            {"name": "dense", **dense},
        ],
        "generator": {"kind": "extractive", "min_similarity": None},
    }
    path = directory / "parallel-rag.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def check_store_in_use(directory, capsys, monkeypatch, store_path: Path, dense: dict) -> None:
    """Library ingest, library query and CLI ingest against a store another process holds."""
    config_path = store_config(directory, dense)
    docs = directory / "docs"
    docs.mkdir()
    (docs / "bridges.md").write_text("# Bridges\n" + TENANT_DOCS[0]["content"], encoding="utf-8")
    config, base_dir = load_config(config_path)

    with pytest.raises(StoreInUseError) as raised:
        ingest_paths([docs], config, base_dir, progress=False)
    message = str(raised.value)
    assert str(store_path) in message and "in use by another process" in message
    assert not (directory / "idx").exists()  # nothing written, not even the BM25 index

    BM25Index.from_chunks([("b1", TENANT_DOCS[0]["content"], {})]).save(directory / "idx/bm25")
    result = build_graph(config_path).invoke({"query": BRIDGE_QUESTION})
    dense_record = branch(result, "dense")
    assert dense_record["status"] == "failed"
    assert "StoreInUseError" in dense_record["error"] and str(store_path) in dense_record["error"]
    assert branch(result, "lexical")["status"] == "ok" and result["documents"]

    monkeypatch.chdir(directory)
    code = main(["--config", str(config_path), "ingest", str(docs), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and str(store_path) in err and "in use by another process" in err
    assert "Traceback" not in err


def test_a_second_process_on_a_qdrant_local_path_gets_a_clear_error(tmp_path, capsys, monkeypatch):
    store_path = (tmp_path / "qdrant").resolve()
    store_path.mkdir()
    dense = {"backend": "qdrant", "backend_config": {"path": "qdrant"}}
    with Holder(HOLD_QDRANT, store_path):
        check_store_in_use(tmp_path, capsys, monkeypatch, store_path, dense)


def test_a_second_process_on_a_milvus_lite_file_gets_a_clear_error(tmp_path, capsys, monkeypatch):
    store_path = (tmp_path / "milvus.db").resolve()
    dense = {"backend": "milvus", "backend_config": {"collection": "docs", "uri": "milvus.db"}}
    with Holder(HOLD_MILVUS, store_path):
        check_store_in_use(tmp_path, capsys, monkeypatch, store_path, dense)
