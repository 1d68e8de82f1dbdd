"""The wheel holds one import package, ``parallel_rag``, and nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_built_wheel_contains_only_parallel_rag(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = tmp_path.glob("parallel_rag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    outside = [
        n for n in names if not n.startswith(("parallel_rag/", "parallel_rag-0.1.0.dist-info/"))
    ]
    assert not outside, outside
    for subpackage in ("graph", "nodes", "backends", "studio"):
        assert f"parallel_rag/{subpackage}/__init__.py" in names
    assert "parallel_rag/graph/builder.py" in names
    assert "parallel_rag/studio/documents/pdf.py" in names  # the converters' subpackage
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "parallel-rag = parallel_rag.studio.cli:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )
