"""README.md and docs/*.md mention only what exists.

Checked in every document: repository paths (anywhere in the text; git-ignored output folders
aside), relative links and their #anchors, `parallel-rag <subcommand>` (and, in shell blocks,
whole command lines, parsed by the CLI's own parser), `make <target>` against the Makefile,
`pip install ".[extra]"` against pyproject.toml, `python -m <module>` for this repository's
modules, and `parallel_rag.*` imports (the module imports and has the name). The YAML blocks of
the README and the reference pages (configuration, backends, surfaces, reliability, benchmarks)
are valid configurations, alone or over the embedded defaults; pages that show code not in the
repository yet (a backend being added) are left out of that check.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
import shlex
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml
from parallel_rag.graph.loading import default_config_dict, parse_config
from parallel_rag.studio.cli.parser import build_parser

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
REFERENCE = ("configuration.md", "backends.md", "surfaces.md", "reliability.md", "benchmarks.md")
TOP_FOLDERS = ("backends", "bench", "docs", "examples", "graph", "nodes", "studio", "tests", ".ci")
TOP_FILES = ("pyproject.toml", "Makefile", "langgraph.json", "README.md", ".gitignore")
PACKAGE = "parallel_rag"

FENCE = re.compile(r"^[ \t]*```(\w*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:"
    + "|".join(re.escape(f"{folder}/") for folder in TOP_FOLDERS)
    + r")[\w.*/-]*|(?:"
    + "|".join(re.escape(name) for name in TOP_FILES)
    + r")(?![\w.-]))(?::(\w+))?"
)
CLI = re.compile(r"(?<![\w./-])parallel-rag(?:\s+--config[ =]\S+)?\s+([a-z][\w-]*)")
MAKE = re.compile(r"(?<![\w./-])make\s+([a-z][\w-]*)")
EXTRA = re.compile(r"\.\[([\w,-]+)\]")
PYTHON_M = re.compile(r"(?<![\w-])python3? -m ([\w.]+)")
DOTTED = re.compile(rf"(?<![\w.]){PACKAGE}(?:\.\w+)+")
FROM_IMPORT = re.compile(rf"(?<![\w.])from ({PACKAGE}(?:\.\w+)+) import ([\w, ]+)")
SHELL = {"bash", "sh", "shell", "console"}
BEING_ADDED = ("backends/grep/", f"{PACKAGE}.backends.grep")
"""The backend docs/adding-a-backend.md adds, module by module: its folder is not in the
repository (tests/integration/test_backend_guide.py builds it from the page and runs it)."""


def split_markdown(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The fenced blocks as (language, body) and the inline code spans outside them."""
    blocks = [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text)]
    return blocks, INLINE.findall(FENCE.sub("", text))


def code_texts(text: str) -> list[str]:
    blocks, spans = split_markdown(text)
    return [body for _, body in blocks] + spans


def ignored_output(path: str) -> bool:
    """A path under a git-ignored folder (indexes, benchmark output) is made by a run."""
    patterns = [
        line.strip().rstrip("/")
        for line in (REPO_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.rstrip("/").split("/")
    for pattern in patterns:
        if "/" in pattern:
            if path.startswith(pattern + "/") or path.rstrip("/") == pattern:
                return True
        elif any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a document's headings."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def make_targets() -> set[str]:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", makefile, re.M))


def shell_commands(body: str) -> list[str]:
    """Logical lines of a shell block (backslash continuations joined), env assignments cut."""
    lines = re.sub(r"\\\n\s*", " ", body).splitlines()
    commands = []
    for line in lines:
        line = re.sub(r"^\s*(?:[A-Z_][A-Z0-9_]*=\S+\s+)*", "", line)
        if line:
            commands.append(line)
    return commands


def cli_subcommands() -> set[str]:
    """The subcommands the CLI's parser offers, as its usage line lists them."""
    (choices,) = re.findall(r"\{([\w,-]+)\}", build_parser().format_usage())
    return set(choices.split(","))


def module_file(module: str) -> Path | None:
    """This repository's file for a ``parallel_rag.*`` or top-level-folder module, if any."""
    parts = module.split(".")
    if parts[0] == PACKAGE:
        parts = parts[1:]
    if not parts or parts[0] not in TOP_FOLDERS:
        return None
    base = REPO_ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@pytest.fixture(params=DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def document(request) -> Path:
    return request.param


def test_the_documents_exist():
    names = {p.name for p in DOCUMENTS}
    for expected in REFERENCE:
        assert expected in names
    assert len((REPO_ROOT / "README.md").read_bytes()) < 8 * 1024, "README over two screens"


def test_repository_paths_exist(document):
    problems = []
    for match in REPO_PATH.finditer(document.read_text(encoding="utf-8")):
        path, name = match.group(1).rstrip(".,;"), match.group(2)
        if ignored_output(path) or path.startswith(BEING_ADDED):
            continue
        found = sorted(REPO_ROOT.glob(path.rstrip("/"))) if "*" in path else [REPO_ROOT / path]
        if not found or not all(p.exists() for p in found):
            problems.append(f"{path}: no such file or folder")
        elif name and not re.search(
            rf"^(?:async def |def |class )?{name}\b", found[0].read_text(encoding="utf-8"), re.M
        ):
            problems.append(f"{path}:{name}: {name} is not defined there")
    assert not problems, problems


def test_links_resolve(document):
    problems = []
    for target in LINK.findall(document.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
            problems.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not problems, problems


def test_cli_subcommands_and_command_lines_parse(document):
    text = document.read_text(encoding="utf-8")
    subcommands = cli_subcommands()
    problems = [
        f"parallel-rag {name}: no such subcommand (have {sorted(subcommands)})"
        for code in code_texts(text)
        for name in CLI.findall(code)
        if name not in subcommands
    ]
    blocks, _ = split_markdown(text)
    for language, body in blocks:
        if language not in SHELL:
            continue
        for line in shell_commands(body):
            if not re.match(r"\s*parallel-rag\s", line):
                continue
            try:
                build_parser().parse_args(shlex.split(line, comments=True)[1:])
            except (SystemExit, ValueError):
                problems.append(f"{line.strip()}: the CLI refuses these arguments")
    assert not problems, problems


def test_make_targets_exist(document):
    targets = make_targets()
    problems = [
        f"make {name}: not a Makefile target"
        for code in code_texts(document.read_text(encoding="utf-8"))
        for name in MAKE.findall(code)
        if name not in targets
    ]
    assert not problems, problems


def test_pip_extras_exist(document):
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"].get("optional-dependencies", {}))
    problems = [
        f".[{group}]: pyproject.toml has no extra {extra!r}"
        for code in code_texts(document.read_text(encoding="utf-8"))
        for group in EXTRA.findall(code)
        for extra in group.split(",")
        if extra not in extras
    ]
    assert not problems, problems


def test_python_modules_and_imports_exist(document):
    text = document.read_text(encoding="utf-8")
    problems = []
    for code in code_texts(text):
        for module in PYTHON_M.findall(code):
            top = module.split(".")[0]
            if top in TOP_FOLDERS and module_file(module) is None:
                problems.append(f"python -m {module}: no such module here")
        for module, names in FROM_IMPORT.findall(code):
            if module.startswith(BEING_ADDED):
                continue
            try:
                imported = importlib.import_module(module)
            except ImportError as error:
                problems.append(f"from {module}: {error}")
                continue
            for name in (n.strip() for n in names.split(",")):
                if name and not hasattr(imported, name):
                    problems.append(f"from {module} import {name}: no such name")
    for dotted in {d for d in DOTTED.findall(text) if not d.startswith(BEING_ADDED)}:
        parts = dotted.split(".")
        for cut in range(len(parts), 1, -1):
            if module_file(".".join(parts[:cut])) is not None:
                obj = importlib.import_module(".".join(parts[:cut]))
                for attribute in parts[cut:]:
                    if not hasattr(obj, attribute):
                        problems.append(f"{dotted}: {attribute} not found")
                        break
                    obj = getattr(obj, attribute)
                break
        else:
            problems.append(f"{dotted}: no such module")
    assert not problems, problems


@pytest.mark.parametrize("name", ["README.md", *REFERENCE])
def test_yaml_blocks_are_valid_configurations(name):
    document = REPO_ROOT / name if name == "README.md" else REPO_ROOT / "docs" / name
    blocks, _ = split_markdown(document.read_text(encoding="utf-8"))
    problems = []
    for language, body in blocks:
        if language not in ("yaml", "yml"):
            continue
        data = yaml.safe_load(textwrap.dedent(body))
        try:
            parse_config({**default_config_dict(), **data}, source=name)
        except ValueError as error:
            problems.append(str(error))
    assert not problems, problems
