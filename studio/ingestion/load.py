"""Stage 1, load: the paths a user gives become the supported files under them, each with the
identity every later stage and every store uses for it.

A file's id is a hash of its resolved path, so ingesting the same file again (from any working
directory) replaces its chunks instead of adding a copy; its source is how citations name it.
Unknown paths and unsupported files are errors naming them, raised before anything is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from parallel_rag.studio.documents import SUPPORTED_SUFFIXES, DocumentLoadError


@dataclass(frozen=True)
class SourceFile:
    """One document to ingest: where it is read from (None for a LangChain ``Document``'s
    source that is no local file), its stable id, and the source citations show."""

    path: Path | None
    file_id: str
    source: str


def file_id_for(path: Path) -> str:
    """Stable id of a file: re-ingesting the same file (from any cwd) replaces its chunks."""
    return "file-" + hashlib.sha1(str(path.resolve()).encode("utf-8")).hexdigest()[:16]


def display_source(path: Path) -> str:
    """How citations name a file: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def source_file(path: Path) -> SourceFile:
    return SourceFile(path, file_id_for(path), display_source(path))


def _supported(path: Path) -> bool:
    return path.suffix.lower() in SUPPORTED_SUFFIXES


def discover_files(paths: Iterable[str | Path]) -> list[Path]:
    """Supported files under the given files/directories, sorted; unknown paths are errors."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(p for p in sorted(path.rglob("*")) if p.is_file() and _supported(p))
        elif path.is_file():
            if not _supported(path):
                raise DocumentLoadError(
                    f"{path}: unsupported file type '{path.suffix}' "
                    f"(supported: {', '.join(sorted(SUPPORTED_SUFFIXES))})"
                )
            found.append(path)
        else:
            raise DocumentLoadError(f"{path}: no such file or directory")
    return list(dict.fromkeys(found))


def load(paths: Iterable[str | Path]) -> list[SourceFile]:
    """The files to ingest under ``paths``, each once; none is an error naming the types
    ingest reads."""
    files = discover_files(paths)
    if not files:
        raise DocumentLoadError(
            f"no {', '.join(sorted(SUPPORTED_SUFFIXES))} files found in the given paths"
        )
    return [source_file(path) for path in files]
