"""Stored sentence vectors survive a writer killed with SIGKILL mid-transaction: a real second
process holds the SQLite write lock when it dies (the store's other tests are in
tests/unit/test_sentence_vectors.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from parallel_rag.nodes.generate.sentence_vectors import SentenceVectorStore

IDENTITY = "counting-letters"


def test_a_writer_killed_mid_transaction_leaves_the_store_as_it_was(tmp_path):
    path = tmp_path / "v.sqlite3"
    SentenceVectorStore(path, IDENTITY).put(["kept"], [[1.0] * 26])
    script = textwrap.dedent(
        f"""
        import sqlite3, sys
        connection = sqlite3.connect({str(path)!r})
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(
            "INSERT INTO sentence_vectors (key, vector) VALUES (?, ?)",
            [(bytes([i % 256, i // 256]) * 8, b"\\0" * 16) for i in range(5000)],
        )
        print("written", flush=True)
        sys.stdin.readline()
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "written"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    store = SentenceVectorStore(path, IDENTITY)
    assert len(store) == 1 and set(store.get(["kept"])) == {"kept"}
    assert store.put(["after"], [[1.0] * 26]) == 1 and len(store) == 2
