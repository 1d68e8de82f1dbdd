"""``parallel-rag serve --workers 2``: two worker processes under one supervisor on one port,
each with its own warmed-up app, answering the same requests the same way; stopped (workers
included) by the supervisor's PID."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from app_servers import running_serve
from studio_servers import server_workspace

pytestmark = pytest.mark.integration

QUESTION = "Who wrote the first computer program?"


def worker_pids(supervisor: int) -> list[int]:
    """The supervisor's children that run uvicorn workers (multiprocessing's spawned
    interpreters), from /proc."""
    children = []
    for task in os.listdir(f"/proc/{supervisor}/task"):
        with open(f"/proc/{supervisor}/task/{task}/children") as handle:
            children += [int(pid) for pid in handle.read().split()]
    workers = []
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"spawn_main" in handle.read():
                workers.append(pid)
    return workers


def gone(pid: int) -> bool:
    """No such process, or only its exit status left (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_two_workers_on_one_port_answer_alike(example_index, tmp_path):
    config_path = server_workspace(example_index, tmp_path, {})
    with running_serve(config_path, tmp_path, "--workers", "2") as (server, url):
        workers = worker_pids(server.pid)
        assert len(workers) == 2
        body = {"input": {"query": QUESTION, "top_k": 3}}

        def ask(_):
            response = httpx.post(f"{url}/rag/invoke", json=body, timeout=300)
            response.raise_for_status()
            return [d["id"] for d in response.json()["output"]["documents"]]

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(8)))
        assert answers[0] and all(a == answers[0] for a in answers)
    for pid in workers:
        assert (
            not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        )


def test_workers_below_one_is_refused(tmp_path):
    import subprocess

    from servers import BIN

    done = subprocess.run(
        [str(BIN / "parallel-rag"), "serve", "--workers", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "--workers: at least 1, got 0" in done.stderr
