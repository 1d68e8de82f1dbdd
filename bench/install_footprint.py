"""What installing and importing parallel-rag costs: packages and installed size of the core and
of each extra, the import of ``build_graph`` beside the langgraph + langchain-core floor, and
``parallel-rag --help`` (issue 51's bars: core <= 60 packages without torch, the import <= 1.3x
the floor, ``--help`` <= 1 s).

Packages: ``pip install --dry-run --ignore-installed --report`` of the project (core) and of the
project with each extra, with ``constraints.txt`` as ``make demo`` installs, so nothing is
installed. The baseline row is the dependency list of ``pyproject.toml`` before the split (every
runtime dependency pinned, 125 packages), resolved the same way. Installed size is the sum of
the files each distribution's ``RECORD`` lists, read from the environment of ``--sizes-from``
(default: this interpreter's, the test venv, which has every extra); a package missing there is
counted as unknown and said so.

Import and ``--help``: each statement runs ``--runs`` times in a fresh interpreter of
``--python`` (default: this one; ``make demo``'s venv measures the core install), the statements
interleaved so the floor and the product share the machine's state; medians of wall time, CPU
time (the child's user + system) and resident memory after the import. Every child reads and
writes its bytecode in one cache folder (``PYTHONPYCACHEPREFIX``, whatever
``PYTHONDONTWRITEBYTECODE`` says), filled by one untimed run of each statement first: an
installed wheel's modules come compiled, as the floor's do, while an editable checkout under
``PYTHONDONTWRITEBYTECODE`` would compile the product's sources on every import (about 130 ms
of CPU here) and time the compiler rather than the import. The floor is what every
LangGraph app on LangChain imports: ``StateGraph``, ``BaseRetriever`` and ``BaseChatModel``;
``import langgraph, langchain_core`` alone (two nearly empty package ``__init__``s) is shown too.

    python -m bench.install_footprint [--python PATH] [--runs 7] [--no-packages]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "2938c3d^"  # pyproject.toml before the ranges and the core/extras split
FLOORS = {
    "import langgraph, langchain_core": "import langgraph, langchain_core",
    "floor: StateGraph + BaseRetriever + BaseChatModel": (
        "from langgraph.graph import StateGraph\n"
        "from langchain_core.retrievers import BaseRetriever\n"
        "from langchain_core.language_models import BaseChatModel"
    ),
}
PRODUCT = {
    "from parallel_rag.graph import build_graph": "from parallel_rag.graph import build_graph"
}
PROBE = """
import json, time
wall, cpu = time.perf_counter(), time.process_time()
exec({statement!r})
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
print(json.dumps({{"wall": wall, "cpu": cpu, "rss_mb": rss / 1024}}))
"""


def pip_report(requirements: list[str], constraints: Path | None) -> list[tuple[str, str]]:
    """(name, version) of everything pip would install for ``requirements`` on an empty
    environment (a dry run: metadata only)."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
        command += ["--quiet", "--report", str(report)]
        if constraints is not None:
            command += ["-c", str(constraints)]
        answer = subprocess.run(
            [*command, *requirements], capture_output=True, text=True, cwd=ROOT, timeout=1800
        )
        if answer.returncode != 0:
            raise RuntimeError(f"pip could not resolve {requirements}: {answer.stderr[-1500:]}")
        found = json.loads(report.read_text())["install"]
    return sorted((i["metadata"]["name"], i["metadata"]["version"]) for i in found)


def installed_bytes(name: str) -> int | None:
    """Bytes of the files an installed distribution's RECORD lists; None when not installed."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    total = 0
    for file in dist.files or ():
        if file.size:
            total += file.size
        else:  # RECORD gives no size for some entries (the RECORD itself, .pyc files)
            path = Path(dist.locate_file(file))
            total += path.stat().st_size if path.is_file() else 0
    return total


def footprint(packages: list[tuple[str, str]]) -> tuple[int, float, list[str]]:
    """(packages, installed MB, names whose size is unknown here)."""
    sizes = {name: installed_bytes(name) for name, _ in packages}
    unknown = sorted(name for name, size in sizes.items() if size is None)
    return len(packages), sum(s or 0 for s in sizes.values()) / 2**20, unknown


def baseline_requirements() -> list[str]:
    old = subprocess.run(
        ["git", "show", f"{BASELINE_COMMIT}:pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return list(tomllib.loads(old)["project"]["dependencies"])


def extras() -> list[str]:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [name for name in declared["optional-dependencies"] if name not in ("all", "test")]


def package_rows() -> list[str]:
    constraints = ROOT / "constraints.txt"
    core = pip_report([str(ROOT)], constraints)
    core_names = {name for name, _ in core}
    count, size, unknown = footprint(core)
    rows = [
        "| install | packages | + vs core | installed MB | + MB vs core | torch? |",
        "|---|---:|---:|---:|---:|---|",
    ]
    base_count, base_size, base_unknown = footprint(
        pip_report(baseline_requirements(), constraints)
    )
    rows.append(
        f"| baseline: every dependency pinned ({BASELINE_COMMIT}), + parallel-rag | "
        f"{base_count + 1} | {base_count + 1 - count:+d} | {base_size:.0f} | "
        f"{base_size - size:+.0f} | yes |"
    )
    rows.append(f"| `pip install parallel-rag` (core) | {count} | - | {size:.0f} | - | no |")
    notes = [f"core: size unknown for {', '.join(unknown)}"] if unknown else []
    if base_unknown:
        notes.append(f"baseline: size unknown for {', '.join(base_unknown)}")
    for extra in extras():
        found = pip_report([f"{ROOT}[{extra}]"], constraints)
        n, mb, missing = footprint(found)
        torch = "yes" if any(name == "torch" for name, _ in found) else "no"
        added = sorted({name for name, _ in found} - core_names)
        rows.append(
            f"| `parallel-rag[{extra}]` | {n} | {n - count:+d} | {mb:.0f} | {mb - size:+.0f} "
            f"| {torch} |"
        )
        notes.append(f"{extra}: adds {', '.join(added) or 'nothing'}")
        if missing:
            notes.append(f"{extra}: size unknown for {', '.join(missing)}")
    return rows + [""] + [f"- {note}" for note in notes]


PYCACHE = Path(tempfile.gettempdir()) / "parallel-rag-footprint-pycache"


def child_env() -> dict[str, str]:
    """This environment, with bytecode read from and written to ``PYCACHE``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(PYCACHE)}


def run_child(command: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    answer = subprocess.run(command, capture_output=True, text=True, timeout=300, env=child_env())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if answer.returncode != 0:
        raise RuntimeError(f"{command} failed: {answer.stderr[-1500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, answer.stdout


def import_rows(python: str, runs: int) -> list[str]:
    statements = {**FLOORS, **PRODUCT}
    found: dict[str, list[dict]] = {label: [] for label in statements}
    for statement in statements.values():  # untimed: fills the bytecode cache
        run_child([python, "-c", PROBE.format(statement=statement)])
    for _ in range(runs):
        for label, statement in statements.items():
            _, _, out = run_child([python, "-c", PROBE.format(statement=statement)])
            found[label].append(json.loads(out.strip().splitlines()[-1]))
    median = {
        label: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for label, rows in found.items()
    }
    floor = median["floor: StateGraph + BaseRetriever + BaseChatModel"]
    rows = [
        "| import (fresh interpreter) | wall ms | CPU ms | RSS MB | wall x floor | CPU x floor "
        "| RSS x floor |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, m in median.items():
        rows.append(
            f"| `{label}` | {m['wall'] * 1000:.0f} | {m['cpu'] * 1000:.0f} | {m['rss_mb']:.0f} | "
            f"{m['wall'] / floor['wall']:.2f} | {m['cpu'] / floor['cpu']:.2f} | "
            f"{m['rss_mb'] / floor['rss_mb']:.2f} |"
        )
    return rows


def help_rows(python: str, runs: int) -> list[str]:
    script = Path(python).parent / "parallel-rag"
    commands = {
        "python -c pass (interpreter start)": [python, "-c", "pass"],
        "parallel-rag --help": [str(script), "--help"],
    }
    found: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
    for command in commands.values():  # untimed: fills the bytecode cache
        run_child(command)
    for _ in range(runs):
        for label, command in commands.items():
            wall, cpu, _ = run_child(command)
            found[label].append((wall, cpu))
    rows = ["| command | wall ms | CPU ms |", "|---|---:|---:|"]
    for label, times in found.items():
        wall = statistics.median(t[0] for t in times)
        cpu = statistics.median(t[1] for t in times)
        rows.append(f"| `{label}` | {wall * 1000:.0f} | {cpu * 1000:.0f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="install footprint, import time, --help time")
    parser.add_argument("--python", default=sys.executable, help="interpreter to time imports in")
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per statement")
    parser.add_argument("--no-packages", action="store_true", help="skip the pip dry runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    print(f"python: {args.python}; runs: {args.runs}; CPUs: {os.cpu_count()}\n")
    if not args.no_packages:
        print("\n".join(package_rows()), end="\n\n", flush=True)
    print("\n".join(import_rows(args.python, args.runs)), end="\n\n", flush=True)
    print("\n".join(help_rows(args.python, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
