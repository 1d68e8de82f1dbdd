"""A floor under conversion quality on documents this project did not write: manuals Debian
packages install under /usr/share/doc (``make documents-in-the-wild``; public domain or
permissive licences), read where they are installed, ingested with the shipped defaults and
asked questions written from their text. ``bench/conversion_quality.py`` owns the files, the
questions and the scoring; this runs a few of them through its ``--files`` mode, as a user runs
it, and holds what it measured (bench/CONVERSION-QUALITY-RESULTS.md has every question). That
mode leaves the fusion unfitted: on these four files the fit keeps the shipped fusion anyway
(``bench.conversion_quality.floor_run`` says what was measured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
FILES = [
    "bzip2-manual.pdf",  # 38 pages of a man page and a library manual (bzip2-doc)
    "crc-doc.pdf",  # a typeset paper: formulas, code listings with spaced-out letters
    "zlib-usage-example.html",  # prose between <pre> code blocks
    "libffi-thread-safety.html",  # texinfo: a short page between navigation panels
]


def test_citations_name_the_right_file_and_page_or_section():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench.conversion_quality", "--files", *FILES],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == 10, done.stdout
    wrong_file = [a for a in answers if not a["file_at_1"]]
    assert not wrong_file, wrong_file
    not_in_top_3 = [a for a in answers if not a["place_at_3"]]
    assert not not_in_top_3, not_in_top_3
    wrong_place = [a for a in answers if not a["place_at_1"]]
    assert len(wrong_place) <= 1, wrong_place  # measured: 1 (bzip2 -s memory: p. 19, not 7)
    by_question = {a["question"]: a["cited"] for a in answers}
    assert by_question["Is libffi thread-safe?"] == (
        "libffi-thread-safety.html § 2.7 Thread Safety"  # navigation panels left out
    )
