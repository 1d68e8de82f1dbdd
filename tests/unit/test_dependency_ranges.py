"""Every dependency a user installs is a range, not a pin: a lower bound the suite was run on
and an upper bound at the next major (issue 51: with ``==`` everywhere, the package could only
live in an environment built for it). The exact versions live in ``constraints.txt``, which
``make demo``, ``make test`` and CI install with, so every range's lower bound is checked
against it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [("dependencies", Requirement(line)) for line in project["dependencies"]]
    for extra, lines in project["optional-dependencies"].items():
        for line in lines:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) != "parallel-rag":
                found.append((extra, requirement))
    return found


def pins() -> dict[str, Version]:
    text = (ROOT / "constraints.txt").read_text()
    return {
        canonicalize_name(name): Version(version)
        for name, version in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)$", text, re.M)
    }


def test_every_dependency_is_a_bounded_range():
    for where, requirement in requirements():
        operators = {spec.operator for spec in requirement.specifier}
        assert operators == {">=", "<"}, f"{where}: {requirement} is not >=lower,<upper"


def test_upper_bound_is_the_next_major_or_minor():
    """``<N+1`` for 1.x and later; ``<0.(x+1)`` for 0.x, except the few whose 0.x minors are
    their ordinary releases (as LangChain's own packages bound them)."""
    loose = {"fastapi", "uvicorn", "httpx"}
    for where, requirement in requirements():
        specs = {spec.operator: Version(spec.version) for spec in requirement.specifier}
        lower, upper = specs[">="], specs["<"]
        if lower.major > 0 or canonicalize_name(requirement.name) in loose:
            assert upper == Version(f"{lower.major + 1}"), f"{where}: {requirement}"
        else:
            assert upper == Version(f"0.{lower.minor + 1}"), f"{where}: {requirement}"


def test_constraints_pin_every_dependency_inside_its_range():
    pinned = pins()
    for where, requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{where}: {requirement.name} is not in constraints.txt"
        assert pinned[name] in requirement.specifier, f"{where}: {requirement} vs {pinned[name]}"


def test_constraints_leave_out_the_project_and_cuda():
    pinned = pins()
    assert "parallel-rag" not in pinned
    assert not [name for name in pinned if name.startswith("nvidia-") or name == "triton"]
    assert all(not version.local for version in pinned.values())  # no +cpu build labels
