"""The guide docs/adding-a-backend.md, followed literally: its module plus its one registry
line give a working backend, run end to end in a fresh interpreter (a subprocess, so this lives
with the integration tests; the rest of the registry's tests are in tests/unit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "adding-a-backend.md"
# Run in a fresh interpreter: the guide's module becomes parallel_rag.backends.grep, the guide's
# line is added to a copy of registry.py, then the configuration is derived as usual.
WITH_GREP = """
import json, re, sys, types
from pathlib import Path

guide, registry_file, workdir = sys.argv[1:4]
text = Path(guide).read_text(encoding="utf-8")
module_code = re.search(r"```python\\n(.*?)```", text, re.S).group(1)
added = re.findall(r"^\\+(.*)$", re.search(r"```diff\\n(.*?)```", text, re.S).group(1), re.M)

def install(name, code):
    module = types.ModuleType(name)
    module.__file__ = name
    sys.modules[name] = module
    exec(compile(code, name, "exec"), module.__dict__)

import parallel_rag.backends.base  # noqa: F401  (the package and the contract exist first)
install("parallel_rag.backends.grep", module_code)
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
    "answer": result["answer"],
    "sources": [d["metadata"]["source"] for d in result["documents"]],
    "branches": {b["retriever"]: b["status"] for b in result["branches"]},
}))
"""


def test_the_guides_backend_is_one_module_plus_one_registry_line(tmp_path):
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
    assert outcome["sources"] == ["ada.md"]  # the filter reached the backend
    assert "Ada Lovelace" in outcome["answer"]
    assert outcome["branches"] == {"notes": "ok", "kb": "ok"}
