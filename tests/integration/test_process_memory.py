"""Ingest's allocator settings give freed encoder-sized blocks back to the system.

Each case runs in a fresh interpreter: glibc's threshold is process state, and the pattern is
the encoder's (a large block freed, which raises glibc's own threshold, then batches of 16 MB
tensors with smaller allocations made between them, then the tensors freed)."""

from __future__ import annotations

import ctypes.util
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt and malloc_trim are glibc's",
)

PROBE = r"""
import ctypes, ctypes.util, sys
from parallel_rag.studio.process_memory import give_back_free_memory, map_large_blocks

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
MB = 1 << 20


def rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024


if sys.argv[1] == "map":
    map_large_blocks()
first = libc.malloc(24 * MB)
ctypes.memset(first, 1, 24 * MB)
libc.free(first)  # glibc now serves blocks under 24 MB from its heap
before = rss_mb()
tensors, kept = [], []
for _ in range(10):
    block = libc.malloc(16 * MB)
    ctypes.memset(block, 1, 16 * MB)
    tensors.append(block)
    kept.append(libc.malloc(256 << 10))  # allocated after it: the heap cannot shrink past it
for block in tensors:
    libc.free(block)
if sys.argv[1] == "trim":
    give_back_free_memory()
print(rss_mb() - before)
"""


def retained_mb(mode: str) -> int:
    """MB still resident after 160 MB of blocks were freed, under ``mode``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().splitlines()[-1])


def test_large_blocks_freed_after_map_large_blocks_leave_the_process():
    assert retained_mb("map") <= 16


def test_give_back_free_memory_returns_what_the_heap_kept():
    assert retained_mb("trim") <= 16


def test_the_probe_sees_glibc_keep_freed_blocks_by_default():
    """Without either call the freed blocks stay resident: what the two tests above undo."""
    assert retained_mb("none") >= 100


def test_map_large_blocks_reports_whether_it_took_effect():
    assert ctypes.util.find_library("c") is not None
    from parallel_rag.studio.process_memory import map_large_blocks

    assert map_large_blocks() is True


KERNEL_CACHE = r"""
import os, sys
from parallel_rag.studio.process_memory import ONEDNN_CACHE_ENV, bound_kernel_cache

bound_kernel_cache()
print(os.environ.get(ONEDNN_CACHE_ENV))
"""


@pytest.mark.parametrize(("given", "kept"), [(None, "8"), ("64", "64")])
def test_the_kernel_cache_is_bounded_unless_the_environment_says_otherwise(given, kept):
    # oneDNN kept a compiled kernel per batch shape (1,024 by default): ingest bounds it to 8,
    # and a capacity the user set stays theirs
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    if given is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = given
    done = subprocess.run(
        [sys.executable, "-c", KERNEL_CACHE], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == kept
