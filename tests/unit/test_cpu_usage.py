"""``-p cpu_usage`` (tests/support/cpu_usage.py) writes one row a test: node id, the test
process's CPU seconds, its waited-for children's, and wall seconds."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_each_test_gets_a_row_with_its_cpu_and_wall_seconds(pytester, monkeypatch):
    monkeypatch.setenv("PARALLEL_RAG_CPU_USAGE_DIR", str(pytester.path / "usage"))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this run is not an xdist worker
    pytester.makepyfile(
        test_two="""
        import subprocess, sys

        def test_busy():
            n = 0
            for i in range(3_000_000):
                n += i

        def test_child():
            subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
        """
    )
    assert pytester.runpytest_inprocess("-p", "cpu_usage", "-p", "no:asyncio").ret == 0
    rows = [
        line.split("\t") for line in (pytester.path / "usage" / "main.tsv").read_text().splitlines()
    ]
    assert [r[0] for r in rows] == ["test_two.py::test_busy", "test_two.py::test_child"]
    busy, child = ([float(x) for x in r[1:]] for r in rows)
    assert busy[0] > 0.05 and busy[0] > busy[1]  # its own CPU, no child
    assert child[1] > 0.05  # the child's CPU, reaped by subprocess.run
    assert all(r[2] > 0 for r in (busy, child))
