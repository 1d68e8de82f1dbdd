"""Helpers for the server tests (LangGraph dev server, LangServe): a workspace holding a copy of
the example index and a YAML config, and a server subprocess on 127.0.0.1 stopped by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_TIMEOUT = float(os.environ.get("PARALLEL_RAG_SERVER_START_TIMEOUT", "300"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_workspace(
    example_index, directory: Path, extra: dict[str, Any], *, timeout_seconds: float = 300
) -> Path:
    """Copy the ingested example index into ``directory`` and write a config beside it: the
    retrievers it was ingested with, plus ``extra`` (more retrievers, rewriter, reranker...).
    A copy, because Qdrant local mode lets one process at a time open a folder. Branch timeouts
    are generous: the first query loads the embedding model, on a CPU other work shares."""
    config, base_dir, _ = example_index
    shutil.copytree(base_dir, directory, dirs_exist_ok=True)
    data = config.model_dump(mode="json", exclude_unset=True)
    retrievers = [
        {"timeout_seconds": timeout_seconds, **entry}
        for entry in data["retrievers"] + list(extra.pop("retrievers", []))
    ]
    path = directory / "parallel-rag.yaml"
    path.write_text(yaml.safe_dump({**data, "retrievers": retrievers, **extra}), encoding="utf-8")
    return path


def server_env(config_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PARALLEL_RAG_CONFIG=str(config_path),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


class ServerProcess:
    """A server subprocess in its own session, its output in ``log_path``."""

    def __init__(self, command: list[str], *, env: dict, cwd: Path, log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, url: str, timeout: float = START_TIMEOUT) -> None:
        """Poll ``url`` until it answers 200; fail early if the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.process.returncode}:\n{self.log()[-4000:]}"
                )
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"{url} did not answer within {timeout:.0f}s:\n{self.log()[-4000:]}")

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to our PID, then SIGINT, then SIGKILL to the session we started."""
        try:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGINT, 10)):
                if self.process.poll() is not None:
                    break
                os.kill(self.pid, sig)
                try:
                    self.process.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    continue
            if self.process.poll() is None:
                os.killpg(self.pid, signal.SIGKILL)  # the process group is our PID's session
                self.process.wait(timeout=10)
            # anything the server spawned (worker, resource tracker) goes with its session
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finally:
            self._log.close()
