"""A real ``redis-server`` (Debian's; ``make redis`` installs it) for the shared context cache
tests: 127.0.0.1 on a free port, no persistence, stopped by its PID, and started again on the
same port to stand for a Redis restart."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from servers import ServerProcess, free_port

REDIS_START_SECONDS = 30


class RedisServer:
    """``redis-server`` on 127.0.0.1:``port``; ``stop`` and ``start`` again keep the port."""

    def __init__(self, directory: Path, port: int | None = None):
        self.directory, self.port = directory, port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.server: ServerProcess | None = None

    def start(self) -> RedisServer:
        if shutil.which("redis-server") is None:
            pytest.fail("redis-server is not installed: `make redis` (Debian's redis-server)")
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        log = self.directory / f"redis-{time.monotonic_ns()}.log"
        self.server = ServerProcess(command, log_path=log)
        self.server.wait_for_port(self.port, REDIS_START_SECONDS)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=5)
            assert self.server.process.poll() is not None
            self.server = None


@pytest.fixture()
def redis_server(tmp_path):
    """A fresh Redis for one test, stopped at its end."""
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()
