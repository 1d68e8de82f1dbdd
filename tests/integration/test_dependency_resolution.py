"""The declared ranges resolve together with the newest releases of the libraries a LangChain
app is most likely to have pinned already: langchain-core, langgraph, numpy and torch (issue 51:
``pip install parallel-rag "langchain-core==<newest>"`` failed with ``ResolutionImpossible``).

It asks the package registry (``pip index versions``, the four at once) which release is newest
and lets pip resolve the project with every extra a user may install plus those four pins (``pip
install --dry-run --report``: metadata only, nothing is installed). A newest release that cannot
be installed even on its own (one of its own requirements is missing from the registry) is not
ours to fix: when a resolution fails, each pin pip's error names is tried alone (every pin not
tried yet when it names none), the newest release that does install alone is taken instead, and
the test says which (one resolution when the newest releases install, as they usually do). The
test is skipped only when the registry cannot be reached.

This machine's pip configuration caps torch at the releases kept on its disk; the cap is lifted
for these dry runs (``PIP_CONSTRAINT=/dev/null``), as it does not exist on a user's machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NEWEST = ("langchain-core", "langgraph", "numpy", "torch")
TRIES = 4  # releases tried, newest first, before a package is reported as uninstallable


def pip(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def released(name: str) -> list[str]:
    """The registry's releases of ``name``, newest first (``pip index versions``)."""
    answer = pip("index", "versions", name, timeout=120)
    found = re.search(r"^Available versions: (.+)$", answer.stdout, re.M)
    if answer.returncode != 0 or not found:
        pytest.skip(f"package registry unreachable: {answer.stderr.strip()[-300:]}")
    return [v.strip() for v in found.group(1).split(",")]


def dry_run(*requirements: str, report: Path | None = None) -> subprocess.CompletedProcess:
    args = ["install", "--dry-run", "--ignore-installed", "--no-build-isolation", "-q"]
    if report is not None:
        args += ["--report", str(report)]
    return pip(*args, *requirements)


def newest_installable(name: str, releases: list[str]) -> tuple[str, list[str]]:
    """The newest of ``releases`` (newest first) that resolves on its own, and the newer ones
    that do not (each with pip's reason)."""
    refused = []
    for version in releases[:TRIES]:
        answer = dry_run(f"{name}=={version}")
        if answer.returncode == 0:
            return version, refused
        reason = [line for line in answer.stderr.splitlines() if line.startswith("ERROR")]
        refused.append(f"{name}=={version}: {reason[-1] if reason else answer.stderr[-200:]}")
    pytest.fail(f"none of the {TRIES} newest {name} releases installs: {refused}")


def suspects(stderr: str) -> list[str]:
    """The pinned packages pip's failure names (``... (from langchain-core)``, or a conflict
    with ``The user requested langchain-core==...``), to be tried alone: resolving every pin
    alone cost about as much CPU as the rest of the test. pip's warnings (an index location
    it skips, named per package) are not read."""
    told = "\n".join(line for line in stderr.splitlines() if not line.startswith("WARNING"))
    named = [n for n in NEWEST if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w.-])", told, re.I)]
    return named or list(NEWEST)


def user_extras() -> list[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return sorted(name for name in extras if name != "test")


def test_ranges_resolve_with_the_newest_releases(tmp_path):
    with ThreadPoolExecutor(len(NEWEST)) as pool:  # the registry answers each in its own time
        releases = dict(zip(NEWEST, pool.map(released, NEWEST), strict=True))
    pins = {name: versions[0] for name, versions in releases.items()}
    report = tmp_path / "report.json"
    target = f"{ROOT}[{','.join(user_extras())}]"
    answer = dry_run(target, *(f"{n}=={v}" for n, v in pins.items()), report=report)
    refused, tried = [], set()
    while answer.returncode != 0:  # a newest release may not install even alone: not ours to fix
        untried = [n for n in NEWEST if n not in tried]
        todo = [n for n in suspects(answer.stderr) if n in untried] or untried
        if not todo:
            break
        for name in todo:
            pins[name], skipped = newest_installable(name, releases[name])
            refused += skipped
            tried.add(name)
        answer = dry_run(target, *(f"{n}=={v}" for n, v in pins.items()), report=report)
    if refused:
        print("newest releases that do not install even alone:", *refused, sep="\n  ")
    assert answer.returncode == 0, answer.stderr[-3000:]
    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert chosen["parallel-rag"]
    for name, version in pins.items():
        assert chosen[name] == version
