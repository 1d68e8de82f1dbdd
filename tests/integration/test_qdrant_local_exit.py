"""A process that used Qdrant's local mode exits quietly: the shared clients are closed at exit
(``backends/qdrant/retriever.py``, ``close_clients``), not left to ``QdrantClient.__del__``
during interpreter shutdown, where local mode's close fails and prints a traceback into the
output of every CLI, server and bench run that used it."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from parallel_rag.backends.qdrant.retriever import shared_client
client = shared_client(("path", sys.argv[1]))
client.get_collections()
print("used")
"""


def test_a_process_that_used_local_mode_exits_without_a_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "qdrant")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "used"
    assert "Traceback" not in done.stderr and "sys.meta_path" not in done.stderr, done.stderr
