"""The one place the tests start the product's own servers: ``parallel-rag serve`` (LangServe on
uvicorn) and ``langgraph dev`` (LangGraph Studio's server), each on a free loopback port over a
workspace made by ``studio_servers.server_workspace``.

Each test module still chooses its config (a missing retriever, a leaky endpoint, a rewriter...),
so each module fixture calls ``running_serve`` or ``running_langgraph_dev`` with its own config;
the command, readiness check and stop live here only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servers import BIN, ServerProcess, free_port
from studio_servers import REPO_ROOT, server_env


@contextmanager
def running_serve(
    config_path: Path, workdir: Path, *arguments: str
) -> Iterator[tuple[ServerProcess, str]]:
    """``parallel-rag serve [ARGUMENTS]`` in ``workdir`` on ``config_path``: (server, base URL)
    once ``/healthz`` answers; stopped by its PID on exit (its workers with it)."""
    port = free_port()
    command = [str(BIN / "parallel-rag"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += arguments
    server = ServerProcess(
        command, env=server_env(config_path), cwd=workdir, log_path=workdir / "server.log"
    )
    with server:
        server.wait_for(f"http://127.0.0.1:{port}/healthz")
        yield server, f"http://127.0.0.1:{port}"


@contextmanager
def running_langgraph_dev(config_path: Path, workdir: Path) -> Iterator[tuple[ServerProcess, str]]:
    """``langgraph dev`` on the repo's ``langgraph.json`` with ``config_path``: (server, base
    URL) once ``/ok`` answers; stopped by its PID on exit. It runs from the repo root, as a user
    runs it (its state goes to the git-ignored ``.langgraph_api/``), so two of them never run at
    once: their tests share the ``langgraph-dev`` xdist group (see ``tests/conftest.py``)."""
    port = free_port()
    command = [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    server = ServerProcess(
        command, env=server_env(config_path), cwd=REPO_ROOT, log_path=workdir / "server.log"
    )
    with server:
        server.wait_for(f"http://127.0.0.1:{port}/ok")
        yield server, f"http://127.0.0.1:{port}"
