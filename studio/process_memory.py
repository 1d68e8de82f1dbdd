"""Keeping ingest's resident memory to what it holds, not what its encoder once touched.

Ingest encodes tens of thousands of texts in batches whose tensors (torch's bf16 activations,
ONNX Runtime's inputs) are a few to a few hundred megabytes each and differ in shape from one
batch to the next. glibc's allocator serves blocks over its mmap threshold with ``mmap`` and
gives them back on ``free``, but it raises that threshold every time such a block is freed, so
after the first batches the large tensors come from the heap, and a heap fragmented by them is
not given back: on 1,500 SciFact chunks the process peaked at 1.75 GB where 1.30 GB was in use
(``bench/INGEST-RESULTS.md``). Fixing the threshold (``mallopt``) keeps large blocks on
``mmap``; ``malloc_trim`` at the end of a stage hands back what the small ones left. Neither
changes a vector. Elsewhere than glibc (macOS, musl) both are no-ops. oneDNN's cache of compiled
kernels is bounded too (``bound_kernel_cache``): it kept one per batch shape.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
LARGE_BLOCK = 8 << 20
"""Blocks from this size up are mapped on their own and unmapped when freed (8 MB: a bf16
batch's attention scores and hidden states are larger; 1 MB measured the same peak at more
page faults)."""
TRIM_ABOVE = 32 << 20
"""Free memory at the top of the heap kept for reuse before glibc returns it by itself."""


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - only glibc has both
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


@functools.cache
def map_large_blocks() -> bool:
    """Keep blocks of ``LARGE_BLOCK`` bytes and up on their own mappings for the rest of the
    process (once); False where the C library has no ``mallopt``."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE)
    )


def give_back_free_memory() -> None:
    """Return the allocator's free pages to the system (after a stage that allocated much)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


ONEDNN_CACHE_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_CACHE = 8
"""Compiled kernels oneDNN (torch's CPU backend) keeps for reuse. Its default (1,024) keeps one
per input shape met, and a batch of chunks padded to its longest text is a new shape almost
every time: encoding 500 chunks at a time held 12 MB more after each call, against 4 MB with 8
kept, for the same CPU (``bench/INGEST-RESULTS.md``)."""


def bound_kernel_cache() -> None:
    """Keep at most ``ONEDNN_CACHE`` compiled kernels, unless the environment says otherwise;
    oneDNN reads the setting when it first compiles one, so call this before the first
    encoding of the process."""
    os.environ.setdefault(ONEDNN_CACHE_ENV, str(ONEDNN_CACHE))
