"""Code, docs, bench and tests cite only what is in the repository: no section of a design
document or a task description that a user of the package does not have (the design notes'
section signs, the original brief called "the seed")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = "DESIGN"  # spelt apart so this file does not cite itself
OUTSIDE = re.compile(
    rf"\b{DESIGN}(?:\.md)?\s*\u00a7|\b{DESIGN}\.md\b|\bthe {'seed'}'s\b", re.IGNORECASE
)
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".json", ".txt", ".cfg", ".ini", "Makefile")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / name for name in names if name.endswith(TEXT)]


def test_no_file_cites_a_document_outside_the_repository():
    assert not (REPO / f"{DESIGN}.md").exists()  # were it added, citing it would be fine
    cited = []
    for path in tracked_text_files():
        if not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            if OUTSIDE.search(line):
                cited.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert cited == []
