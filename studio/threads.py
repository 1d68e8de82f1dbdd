"""Conversation threads for the CLI (``parallel-rag chat``, ``ask --thread NAME``): LangGraph's
SQLite checkpointer in a file beside the index, so a new process resumes a thread where the last
one left it.

A thread is LangGraph's own: its ``thread_id`` is the name given, and its checkpoints hold the
conversation (``messages``) and the last turn's result; each turn's documents and branch records
replace the previous turn's (the ``contextualize`` node starts every later turn clean).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

THREADS_FILE = ".parallel-rag/threads.sqlite3"
_THREAD_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


def threads_path(base_dir: Path) -> Path:
    """Where the CLI keeps threads for a configuration rooted at ``base_dir``."""
    return Path(base_dir) / THREADS_FILE


def thread_config(name: str) -> dict[str, Any]:
    """The run config that continues thread ``name`` (letters, digits, ``_.:-``)."""
    if not _THREAD_NAME.match(name or ""):
        raise ValueError(f"--thread: expected 1-100 letters, digits or _.:- , got {name!r}")
    return {"configurable": {"thread_id": name}}


@contextmanager
def open_threads(base_dir: Path) -> Iterator[Any]:
    """A ``SqliteSaver`` on the threads file (made on first use), closed on exit."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = threads_path(base_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        yield saver
