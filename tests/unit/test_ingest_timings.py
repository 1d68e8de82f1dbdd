"""Ingest says where its time went: each stage's wall and CPU seconds, in the report, in
``parallel-rag ingest --json`` and as a table with ``--timings``; the stages add up to the
total."""

from __future__ import annotations

import json

import pytest
from parallel_rag.studio.cli import main
from parallel_rag.studio.ingestion.timings import StageTimings


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "pumps.md").write_text("# Pumps\n\nThe pump hums when the seal is worn.\n")
    (folder / "valves.md").write_text("# Valves\n\nA valve sticks when it is dry.\n")
    return folder


def two_bm25(tmp_path):
    config = tmp_path / "parallel-rag.yaml"
    config.write_text(
        "retrievers:\n"
        "  - {name: lexical, backend: bm25, backend_config: {index_path: idx/a}}\n"
        "  - {name: other, backend: bm25, backend_config: {index_path: idx/b}}\n",
        encoding="utf-8",
    )
    return config


def test_json_report_carries_each_stages_wall_and_cpu(tmp_path, corpus, capsys):
    config = two_bm25(tmp_path)
    assert main(["--config", str(config), "ingest", "--quiet", "--json", str(corpus)]) == 0
    report = json.loads(capsys.readouterr().out)
    timings = report["timings"]
    assert report["chunks"] == 2 and len(report["files"]) == 2
    for stage in ("load", "convert", "chunk", "write lexical (bm25)", "other", "total"):
        assert set(timings[stage]) == {"wall_s", "cpu_s", "items"}, stage
    assert timings["convert"]["items"] == 2 and timings["chunk"]["items"] == 2
    stages = [name for name in timings if name not in ("other", "total")]
    summed = sum(timings[name]["wall_s"] for name in stages) + timings["other"]["wall_s"]
    assert summed == pytest.approx(timings["total"]["wall_s"], abs=0.01)


def test_timings_flag_prints_a_table_after_the_summary(tmp_path, corpus, capsys):
    config = two_bm25(tmp_path)
    assert main(["--config", str(config), "ingest", "--quiet", "--timings", str(corpus)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ingested 2 file(s), 2 chunk(s) into lexical (bm25), other (bm25)")
    header = next(i for i, line in enumerate(lines) if line.startswith("stage"))
    assert lines[header].split() == ["stage", "wall", "s", "CPU", "s", "items"]
    assert lines[-1].split()[0] == "total"


def test_stages_do_not_nest():
    timings = StageTimings()
    with timings.stage("outer"), pytest.raises(RuntimeError, match="inside stage 'outer'"):
        with timings.stage("inner"):
            pass
