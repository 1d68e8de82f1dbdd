"""Small measuring helpers: percentiles, process memory, and a module run in a fresh process.

The bottom of ``bench/``: it imports no other bench module (``bench/worker.py`` runs the
scale tasks on top of it)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULT_PREFIX = "BENCH-RESULT "


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def summary_ms(values_ms: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values_ms),
        "p50": pct(values_ms, 50),
        "p95": pct(values_ms, 95),
        "mean": float(np.mean(values_ms)) if len(values_ms) else float("nan"),
    }


def current_rss_mb() -> float:
    """Resident set size now (Linux /proc; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far: ``VmHWM`` (Linux), else ru_maxrss.
    Not ru_maxrss first: after fork + exec it still holds the parent's peak."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
    except OSError:
        pass
    return found


def process_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of the child processes it has waited
    for (servers a bench section started and stopped): what the section cost, whatever else
    the machine ran."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def tree_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) of a process and all its live descendants (Linux /proc):
    counts an embedded store's engine process (Milvus Lite) with its client."""
    pid = os.getpid() if pid is None else pid
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError, ValueError):
            continue
        stack += _children(current)
    return total


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.started


def emit(result: dict) -> None:
    """A worker's answer: one tagged JSON line on stdout."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


INLINE_ENV = "BENCH_INLINE_WORKERS"


def run_module(arguments: list[str], *, timeout: float) -> dict:
    """Run ``python -m ARGUMENTS...`` from the repository root and return the result it printed
    (``emit_result``); a timeout or an exit without a result comes back as ``{"error": ...}``
    with the end of its output, never raised."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", *arguments],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    return {"error": f"exit {done.returncode}: {' | '.join(tail)[-400:]}"}
