"""Where the suite's CPU goes, test by test: an opt-in pytest plugin (``-p cpu_usage``).

The suite is CPU-bound on two cores, so wall-clock durations (``--durations``) say little about
what to cut: a test waiting on a server looks as long as one that embeds a corpus. With this
plugin every test (its setup and teardown included) gets a row in
``$PARALLEL_RAG_CPU_USAGE_DIR/<worker>.tsv`` (default ``./cpu-usage``): node id, the CPU
seconds of the test process, the CPU seconds of the child processes it waited for (CLI runs,
servers stopped by PID), and the wall seconds. A session fixture's server is waited for when the
session ends, so its CPU lands on the last test of its worker.

    pytest -n 3 -p cpu_usage
    cat cpu-usage/*.tsv | sort -t$'\t' -k2 -gr | head

``docs/testing.md`` has the figures it gave.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import TextIO

import pytest

DIR_ENV = "PARALLEL_RAG_CPU_USAGE_DIR"
ROWS = pytest.StashKey[TextIO]()


def _usage() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        own.ru_utime + own.ru_stime,
        children.ru_utime + children.ru_stime,
        time.perf_counter(),
    )


def pytest_configure(config: pytest.Config) -> None:
    folder = Path(os.environ.get(DIR_ENV, "cpu-usage"))
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    config.stash[ROWS] = open(folder / f"{worker}.tsv", "a", encoding="utf-8")  # noqa: SIM115


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash[ROWS].close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    before = _usage()
    yield
    after = _usage()
    own, children, wall = (a - b for a, b in zip(after, before, strict=True))
    rows = item.config.stash[ROWS]
    rows.write(f"{item.nodeid}\t{own:.2f}\t{children:.2f}\t{wall:.2f}\n")
    rows.flush()
