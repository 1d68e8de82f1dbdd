"""The one way parallel-rag's on-disk stores publish what they write, so a reader (or a writer
killed halfway) never sees a half-written store.

A directory is built in a hidden staging sibling (``.NAME.tmp-*``) and renamed into place only
once it is complete (``write_directory``). Renaming over an existing directory is not atomic, so
the old one is first renamed aside (``.NAME.old-*``), the new one renamed in, and the old one
removed; if the second rename fails the old one is put back, and if the process dies between the
two renames the next writer puts it back (``restore_moved_aside``). A small file (a pointer to
the live revision, say) is replaced with one ``os.replace`` of a complete temporary sibling
(``write_file``).

Used by the BM25 index (one directory replaced whole) and the managed vector store (one new
revision directory per write, then its ``CURRENT`` pointer file).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

STAGING_MARK = ".tmp-"
ASIDE_MARK = ".old-"


def write_directory(target: str | os.PathLike[str], fill: Callable[[Path], None]) -> Path:
    """Create or replace directory ``target`` with what ``fill`` writes into an empty staging
    directory. Until ``fill`` returns, ``target`` stays as it was; if anything fails the
    staging directory is removed and ``target`` is left untouched."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}{STAGING_MARK}", dir=target.parent))
    try:
        fill(staging)
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _swap_in(staging: Path, target: Path) -> None:
    """Rename the complete ``staging`` directory to ``target``, replacing any directory there:
    the old one is renamed aside first and restored if the second rename fails."""
    if not target.exists():
        os.rename(staging, target)
        return
    aside = target.with_name(f".{target.name}{ASIDE_MARK}{uuid.uuid4().hex}")
    os.rename(target, aside)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def restore_moved_aside(
    target: str | os.PathLike[str], is_complete: Callable[[Path], bool]
) -> bool:
    """Put back the directory a replacement had renamed aside when the process died before the
    new one was renamed in (``target`` missing, a complete ``.NAME.old-*`` sibling present);
    True if it did. Only writers call this, before they write."""
    target = Path(target)
    if target.exists():
        return False
    moved = sorted(
        (p for p in target.parent.glob(f".{target.name}{ASIDE_MARK}*") if is_complete(p)),
        key=lambda p: p.stat().st_mtime,
    )
    if not moved:
        return False
    os.rename(moved[-1], target)
    logger.warning("%s: restored what an interrupted write had moved aside", target)
    return True


def write_file(path: str | os.PathLike[str], text: str) -> None:
    """Replace the file ``path`` with ``text`` in one step: readers see the old or the new
    content, never a mix."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}{STAGING_MARK}", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
