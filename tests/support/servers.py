"""The one way the tests start, wait for and stop a server process: ``ServerProcess``.

Every server the tests start listens on 127.0.0.1 (a ``free_port()``), runs in its own session
with its output in a log file, is waited for with a deadline (failing early, with the log's
tail, if the process dies), and is stopped by its PID: SIGTERM, then SIGINT, then SIGKILL to the
session it leads, so whatever it spawned goes with it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

BIN = Path(sys.executable).parent
START_TIMEOUT = float(os.environ.get("PARALLEL_RAG_SERVER_START_TIMEOUT", "300"))
LOG_TAIL = 4000


def free_port() -> int:
    """A TCP port nothing listens on right now, on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_200(url: str) -> Callable[[], bool]:
    """Readiness: ``url`` answers HTTP 200."""

    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    return ready


def accepts_connections(port: int) -> Callable[[], bool]:
    """Readiness: something accepts TCP connections on 127.0.0.1:``port``."""

    def ready() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    return ready


class ServerProcess:
    """A server subprocess in its own session, its output in ``log_path``; a context manager
    that stops it on exit."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            list(command),
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

    def wait_until(
        self,
        ready: Callable[[], bool],
        what: str,
        timeout: float = START_TIMEOUT,
        interval: float = 0.5,
    ) -> None:
        """Poll ``ready()`` until it is true. A process that exits first is a RuntimeError, a
        deadline passed is a TimeoutError; either way the server is stopped and the error
        carries the tail of its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(
                    f"server exited with {self.process.returncode} before {what}:\n"
                    f"{self.log()[-LOG_TAIL:]}"
                )
            if ready():
                return
            time.sleep(interval)
        self.stop()
        raise TimeoutError(f"{what}: not within {timeout:.0f}s:\n{self.log()[-LOG_TAIL:]}")

    def wait_for(self, url: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until ``url`` answers 200."""
        self.wait_until(answers_200(url), f"{url} answers 200", timeout)

    def wait_for_port(self, port: int, timeout: float = START_TIMEOUT) -> None:
        """Wait until 127.0.0.1:``port`` accepts connections."""
        self.wait_until(accepts_connections(port), f"port {port} accepts connections", timeout)

    def wait_for_output(self, text: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until the server has printed ``text``."""
        self.wait_until(lambda: text in self.log(), f"the server prints {text!r}", timeout)

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

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
