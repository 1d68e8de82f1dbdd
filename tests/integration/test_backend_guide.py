"""The guide docs/adding-a-backend.md, followed literally: its folder (three modules) plus its
one registry line give a working backend, whose retriever module loads only when a graph builds
it, run end to end in a fresh interpreter (a subprocess, so this lives with the integration
tests; the rest of the registry's tests are in tests/unit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "adding-a-backend.md"
# Run in a fresh interpreter: the guide's modules become the package parallel_rag.backends.grep
# (imported as the files would be, each when first named), the guide's line is added to a copy
# of registry.py, then the configuration is derived as usual.
WITH_GREP = """
import importlib.abc, importlib.util, json, re, sys, types
from pathlib import Path

guide, registry_file, workdir = sys.argv[1:4]
text = Path(guide).read_text(encoding="utf-8")
files = dict(re.findall(r"`backends/grep/(\\w+)\\.py`:\\n\\n```python\\n(.*?)```", text, re.S))
assert sorted(files) == ["__init__", "retriever", "settings"], sorted(files)
added = re.findall(r"^\\+(.*)$", re.search(r"```diff\\n(.*?)```", text, re.S).group(1), re.M)
PACKAGE = "parallel_rag.backends.grep"
sources = {PACKAGE if n == "__init__" else f"{PACKAGE}.{n}": code for n, code in files.items()}

class GuideFolder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name in sources:
            return importlib.util.spec_from_loader(name, self, is_package=name == PACKAGE)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(sources[module.__name__], module.__name__, "exec"), module.__dict__)

sys.meta_path.insert(0, GuideFolder())

def install(name, code):
    module = types.ModuleType(name)
    module.__file__ = name
    sys.modules[name] = module
    exec(compile(code, name, "exec"), module.__dict__)

import parallel_rag.backends.base  # noqa: F401  (the package and the contract exist first)
registry = Path(registry_file).read_text(encoding="utf-8")
anchor = '    "hybrid",\\n'
install("parallel_rag.backends.registry", registry.replace(anchor, anchor + added[0] + "\\n", 1))

from parallel_rag.graph import ConfigError, build_graph
from parallel_rag.graph.loading import parse_config

notes = {"backend": "grep", "backend_config": {"folder": "notes"}}
errors = []
for bad in ({"backend": "grep"}, {**notes, "similarity_threshold": 0.5}):
    try:
        parse_config({"retrievers": [notes, {**bad, "name": "bad"}]})
    except ConfigError as error:
        errors.append(str(error).splitlines()[1].strip())
lazy = f"{PACKAGE}.retriever" not in sys.modules
graph = build_graph(
    {
        "retrievers": [
            {**notes, "name": "notes"},
            {"name": "kb", "backend": "hybrid", "backend_config": {"primary": notes}},
        ],
        "generator": {"min_similarity": None},
    },
    base_dir=workdir,
)
result = graph.invoke({"query": "Who wrote the first program?", "filters": {"source": "ada.md"}})
print(json.dumps({
    "errors": errors,
    "retriever_loaded": {"at load": not lazy, "when built": f"{PACKAGE}.retriever" in sys.modules},
    "answer": result["answer"],
    "sources": [d["metadata"]["source"] for d in result["documents"]],
    "branches": {b["retriever"]: b["status"] for b in result["branches"]},
}))
"""


def test_the_guides_backend_is_one_folder_plus_one_registry_line(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ada.md").write_text("Ada Lovelace wrote the first program, for the Engine.\n")
    (notes / "bees.md").write_text("Bees wrote nothing; they dance to show where food is.\n")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            WITH_GREP,
            str(GUIDE),
            str(REPO_ROOT / "backends" / "registry.py"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["errors"] == [
        "retrievers.1.backend_config: Field required",
        "retrievers.1.similarity_threshold: does not apply to grep: its scores are shares of "
        "query words, not a similarity",
    ]
    assert outcome["retriever_loaded"] == {"at load": False, "when built": True}
    assert outcome["sources"] == ["ada.md"]  # the filter reached the backend
    assert "Ada Lovelace" in outcome["answer"]
    assert outcome["branches"] == {"notes": "ok", "kb": "ok"}
