"""Reading a store's mapped files into this process up front, for the reader that wants them.

Qdrant Edge keeps a segment's vectors, their 8-bit copies and its payloads in files it maps.
Stored ``cached``, every page is read in when a shard opens; stored ``cold``, a page comes in
the first time a search touches it. Which one is fixed in each segment's files when the segment
is written, not by whoever opens it, and the two processes that open a collection want the
opposite: ingest writes batch after batch into a collection larger than its memory and must
not read the whole collection in to add to it (stored ``cached``, its peak grew with the
corpus, to 8.2 GB at 100k documents: ``bench/INGEST-RESULTS.md``), while a server wants every
page in before its first query (a page met for the first time costs a fault; on a fresh process
the first queries took several times as long).

So collections are written ``cold`` and a reader populates its own mappings of the revision it
opens: ``populate_mapped(directory)`` asks the kernel (``madvise(MADV_POPULATE_READ)``, Linux
5.14 and later) to map in every page of every mapping of a file under ``directory``, what
``cached`` does at open. Where that call is missing (another system, an older kernel) nothing
happens and pages come in as searches touch them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from pathlib import Path

MADV_POPULATE_READ = 22
logger = logging.getLogger(__name__)


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        madvise = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def mapped_ranges(directory: Path) -> list[tuple[int, int]]:
    """(start, end) of each of this process's mappings of a file under ``directory``."""
    prefix = str(directory.resolve()).rstrip("/") + "/"
    ranges = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].rstrip("\n").startswith(prefix):
                    start, end = (int(part, 16) for part in fields[0].split("-"))
                    ranges.append((start, end))
    except OSError:  # no /proc: not Linux
        return []
    return ranges


def populate_mapped(directory: Path) -> int:
    """Read in every page this process maps from files under ``directory``; the bytes it
    covered (0 where the kernel or the system cannot)."""
    madvise = _madvise()
    if madvise is None:
        return 0
    covered = 0
    for start, end in mapped_ranges(directory):
        if madvise(start, end - start, MADV_POPULATE_READ) != 0:
            error = ctypes.get_errno()
            logger.debug("madvise(MADV_POPULATE_READ) failed under %s: errno %d", directory, error)
            if error == 22:  # EINVAL: a kernel without it; the pages come in as touched
                return covered
            continue  # a mapping gone meanwhile (ENOMEM) or not readable: the next one
        covered += end - start
    return covered
