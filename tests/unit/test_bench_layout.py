"""``bench/`` imports in one direction: shared helpers below, sections above, one runner on top.

A cycle between bench modules (even through an import inside a function) means a reader cannot
read one module without the other, and one section's change can break another section's run.
The graph is read from the source with ``ast``, so nothing in ``bench/`` is imported here.
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
PACKAGE = "bench"
HELPERS = {
    "__init__",
    "baselines",  # what the product is measured against (EnsembleRetriever, hand-written RRF)
    "data",  # the evaluation collections, smoke slices, the synthetic corpus
    "embedding_cache",  # vectors computed once
    "measure",  # percentiles, memory, CPU, a module run in a fresh process
    "offline_llm",  # SmolLM2 served by llama.cpp for the LLM rows
    "pipelines",  # the shipped BM25 + Qdrant Edge pipeline over the bench's indexes
    "scoring",  # the measures of ranked runs and of answers
    "tables",  # the markdown table writer
    "worker",  # one scale measurement per process
}
RUNNER = {"__main__", "run", "report"}
RUNS_ANOTHER = {
    ("latency", "orchestration"),  # the overhead table is orchestration's measurement
    ("scale", "ann_stores"),  # the store rows are ann_stores' measurement, one per process
    ("query_expansion", "rewriting"),  # prf beside the chat-model rewriters' rows
    ("generation_latency", "answers"),  # its commit and question range, as answers reads them
}
"""The measurements that run another's measurement: every other one imports only helpers."""


def bench_modules() -> set[str]:
    return {path.stem for path in BENCH_DIR.glob("*.py")}


def imported_bench_modules(source: str, modules: set[str]) -> set[str]:
    """The bench modules a module's source imports, at the top or inside any function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import: `from . import x` or `from .x import y`
                base = node.module or ""
                names = [f"{PACKAGE}.{base}".rstrip(".")]
            else:
                names = [node.module or ""]
            if names[0] == PACKAGE:  # `from bench import quality`: the names are modules
                names = [f"{PACKAGE}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) >= 2 and parts[0] == PACKAGE and parts[1] in modules:
                found.add(parts[1])
    return found


def import_graph() -> dict[str, set[str]]:
    modules = bench_modules()
    return {
        module: imported_bench_modules(
            (BENCH_DIR / f"{module}.py").read_text(encoding="utf-8"), modules
        )
        - {module}
        for module in sorted(modules)
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module: each one is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def test_the_reader_finds_imports_inside_functions_and_package_imports():
    source = (
        "from bench.data import x\n"
        "def f():\n"
        "    from bench import quality, report\n"
        "    import bench.scale\n"
        "    from bench.nowhere import y\n"
    )
    modules = {"data", "quality", "report", "scale"}
    assert imported_bench_modules(source, modules) == {"data", "quality", "report", "scale"}


def test_the_cycle_finder_names_each_cycle():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"e"}, "e": {"d"}}
    assert strongly_connected(graph) == [["a", "b"], ["d", "e"]]


def test_bench_has_no_import_cycle():
    cycles = strongly_connected(import_graph())
    assert cycles == [], f"bench/ modules importing each other: {cycles}"


def test_helpers_import_only_helpers():
    """The shared pieces sit below every section: a helper never reaches up into one."""
    graph = import_graph()
    assert HELPERS <= set(graph), sorted(HELPERS - set(graph))
    upward = {module: sorted(graph[module] - HELPERS) for module in HELPERS}
    assert upward == {module: [] for module in HELPERS}


def test_measurements_import_helpers_and_only_the_named_measurements():
    graph = import_graph()
    measurements = set(graph) - HELPERS - RUNNER
    found = {
        (module, target)
        for module in measurements
        for target in graph[module]
        if target in measurements
    }
    assert found == RUNS_ANOTHER


def test_the_runner_is_on_top():
    """Nothing in bench imports the runner: it is the one module that imports the sections."""
    graph = import_graph()
    importers = sorted(module for module, targets in graph.items() if "run" in targets)
    assert importers == ["__main__"], importers
    sections = set(graph) - HELPERS - RUNNER
    assert not {module for module in sections if graph[module] & RUNNER}, (
        "a section imports the runner"
    )
