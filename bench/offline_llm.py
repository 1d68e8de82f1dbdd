"""The offline chat model the bench measures LLM features with: SmolLM2-135M-Instruct (packaged
GGUF) served by ``llama-cpp-python``'s OpenAI-compatible server on a free loopback port.

Shared by the rewriter rows (``bench/rewriting.py``), the answers' LLM generator rows
(``bench/answers.py``), the LLM rerank scorer (``bench/rerank.py``) and the runner; it imports
no bench module.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


def offline_llm_available() -> str | None:
    """None when the harness can start the offline LLM; else why not."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    try:
        from parallel_rag.nodes.chat_models import smollm2_gguf_path

        smollm2_gguf_path()
    except Exception as error:  # noqa: BLE001
        return str(error)
    return None


@contextmanager
def llama_server(log_path: Path, timeout: float = 180):
    """``python -m llama_cpp.server`` with the packaged SmolLM2 on a free loopback port."""
    from parallel_rag.nodes.chat_models import smollm2_gguf_path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the server
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(smollm2_gguf_path()),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {process.returncode}")
            try:
                with urllib.request.urlopen(base_url + "/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("llama_cpp.server did not start in time") from None
                time.sleep(0.5)
        yield base_url
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()
