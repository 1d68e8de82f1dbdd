"""Real store servers the tests share, one per test process: ``milvus-lite server`` on a free
loopback port (Milvus's own server wire protocol, not the embedded file)."""

from __future__ import annotations

import sys

import pytest
from servers import ServerProcess, free_port

MILVUS_START_TIMEOUT = 60


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """The URI of a ``milvus-lite server`` on 127.0.0.1:<free port>, stopped by its PID at the
    end of the session (its cached clients forgotten first)."""
    from parallel_rag.backends.milvus.stores import forget_stores

    data_dir = tmp_path_factory.mktemp("milvus-server")
    port = free_port()
    server = ServerProcess(
        [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(data_dir / "data")]
        + ["--host", "127.0.0.1", "--port", str(port)],
        log_path=data_dir / "server.log",
    )
    server.wait_for_port(port, MILVUS_START_TIMEOUT)
    uri = f"http://127.0.0.1:{port}"
    yield uri
    forget_stores(uri)
    server.stop(grace=15)
    assert server.process.poll() is not None
