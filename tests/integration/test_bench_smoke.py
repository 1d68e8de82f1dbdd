"""The benchmark harness keeps working: ``python -m bench --smoke`` on tiny slices of the shared
collections writes its tables and plots, and a missing data folder stops it cleanly.

The smoke run writes under ``bench/out/smoke`` (git-ignored), never over ``bench/RESULTS.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeSettings

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("PARALLEL_RAG_DATA", REPO_ROOT.parent / "shared" / "data"))
SMOKE_TIMEOUT = float(os.environ.get("BENCH_SMOKE_TIMEOUT", "600"))


def _bench(*args: str, env: dict | None = None, timeout: float = SMOKE_TIMEOUT):
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})},
    )


def test_missing_data_stops_with_a_clear_message(tmp_path):
    done = _bench("--smoke", env={"PARALLEL_RAG_DATA": str(tmp_path / "nowhere")}, timeout=60)
    assert done.returncode == 2
    assert "evaluation data not found" in done.stderr
    assert "PARALLEL_RAG_DATA" in done.stderr
    assert "Traceback" not in done.stderr


def test_smoke_run_writes_results_and_plots(tmp_path):
    out = tmp_path / "bench"
    done = _bench("--smoke", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (out / "RESULTS.md").read_text(encoding="utf-8")
    for heading in (
        "## Headline",
        "## Quality: SciFact test",
        "## Quality: HotpotQA dev500",
        "## Latency: fan-out",
        "## Latency: overhead",
        "## Latency: per node",
        "## Scale: BM25",
        "## Scale: embedded vector stores",
        "## Ingestion",
        "## Answers: HotpotQA dev500",
        "## Quality: Vaswani (not tuned on)",
        "## Beyond one machine",
        "### Lexical branch: Milvus full text beside bm25s",
        "### Context cache: Redis beside in-process",
        "### `serve --workers 2` beside one worker",
    ):
        assert heading in report, heading
    assert "EnsembleRetriever" in report
    assert (out / "latency_vs_branches.png").stat().st_size > 1000
    assert (out / "quality_per_configuration.png").stat().st_size > 1000
    # the results beside their report: never over the ones the committed report came from
    results = json.loads((out / "smoke-results.json").read_text())
    assert results["meta"]["errors"] == {}

    # quality: the shipped defaults beside the previous default, the singles and the ensemble
    for collection in ("scifact", "hotpotqa"):
        kinds = [row["kind"] for row in results["quality"][collection]["rows"]]
        for kind in ("single", "fused", "fused-previous", "ensemble", "fused-tuned"):
            assert kind in kinds, (collection, kind)
    # and on a collection nothing was tuned on: no tuned row there
    kinds = [row["kind"] for row in results["quality"]["vaswani"]["rows"]]
    assert set(kinds) == {"single", "fused", "fused-previous", "ensemble"}, kinds
    assert "| Vaswani nDCG@10 (not tuned on) |" in report
    shipped = next(r for r in results["quality"]["scifact"]["rows"] if r["kind"] == "fused")
    assert "shipped defaults (minmax, dense weight 0.75" in shipped["config"]

    # the model-free rewriter is measured in every run, beside the no-rewriter row
    rewriters = results["quality"]["hotpotqa"]["rewriter_rows"]
    assert [row["kind"] for row in rewriters] == ["fused", "rewriter"]
    assert "prf rewriter (no model" in rewriters[1]["config"]
    assert 0 <= rewriters[1]["AllSupport@10"] <= 1 and rewriters[1]["rewrite_failed"] < 1
    assert "### HotpotQA with each rewriter kind" in report

    # answers: the tuning questions, then the report questions, each with the shipped
    # generator beside the one the bars were set against (when this checkout holds it)
    ranges = results["answers"]["ranges"]
    assert [r["questions"] for r in ranges] == ["1-6", "7-12"]
    has_before = (
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "cat-file", "-e", "2dba63c^{commit}"],
            capture_output=True,
        ).returncode
        == 0
    )
    for measured in ranges:
        labels = [row["generator"] for row in measured["rows"]]
        assert any(label.startswith("extractive, default (") for label in labels), labels
        assert any(label.startswith("extractive, before (2dba63c)") for label in labels) == (
            has_before
        )
        for row in measured["rows"]:
            assert 0 <= row["recall"] <= 1 and 0 <= row["ceiling"] <= 1
            assert row["answerable"] <= row["questions"] == 6
            assert row["median_words"] > 0
    assert "answer recall ≥ 0.8 × retrieval ceiling" in report
    assert "not measured by this run: `bench/ANSWER-RESULTS.md`" not in report
    assert "not measured by this run: `bench/FUSION-RESULTS.md`" not in report

    # overhead: the product's retrieval path, sync and async, beside the baselines
    overhead = results["latency"]["overhead"]["stats"]
    for method in (
        "ParallelFusionRetriever.invoke",
        "ParallelFusionRetriever.ainvoke",
        "hand-written",
        "EnsembleRetriever.invoke",
    ):
        assert any(method in name for name in overhead), method
    assert "ParallelFusionRetriever.invoke p50" in results["latency"]["fanout"]["rows"][0]

    # stores: the shipped Qdrant Edge beside Qdrant local and Milvus Lite, recall measured
    stores = {row["store"]: row for row in results["scale"]["stores"]}
    assert set(stores) == {"edge", "qdrant_local", "milvus_lite"}
    assert all("error" not in row for row in stores.values())
    assert all(0 <= row["recall_at_10"] <= 1 for row in stores.values())
    assert stores["edge"]["hnsw_ef"] == QdrantEdgeSettings().hnsw_ef  # the shipped search beam

    # beyond one machine: Milvus full text beside bm25s (and the tokenizer-matched bm25s) on
    # all three collections, the Redis cache beside the in-process one, two workers beside one
    beyond = results["beyond"]
    for name, measured in beyond["fulltext"]["collections"].items():
        engines = {row["engine"]: row for row in measured["rows"]}
        assert {"bm25s english", "bm25s plain", "milvus standard"} <= set(engines), name
        assert all(0 <= row["nDCG@10"] <= 1 and row["p50_cpu_ms"] > 0 for row in engines.values())
    assert set(beyond["fulltext"]["collections"]) == {"scifact", "hotpotqa", "vaswani"}
    assert beyond["fulltext"]["stemmer_probe"]["stemmer"] in ("stems", "does not stem")
    rates = beyond["cache"]["hit_rates"]
    assert rates["two replicas, shared Redis"] == rates["one replica, in-process cache"] > 0
    assert 0 < beyond["cache"]["latency"]["Redis (loopback)"]["p50_ms"] < 50
    workers = beyond["workers"]["rows"]
    assert [row["workers"] for row in workers] == [1, 2]
    assert all(row["errors"] == row["lost_branches"] == 0 for row in workers)
    assert all(row["throughput_rps"] > 0 and row["server_cpu_ms_per_request"] for row in workers)

    # the headline says where each figure this run did not measure comes from
    assert "not measured by this run: `bench/ANN-RESULTS.md`" in report


def test_ann_bench_loads_the_sentence_store_in_batches_as_ingest_does(tmp_path):
    """``bench.ann_stores --writes N`` writes its sentence-weighted store in N ``write_chunks``
    calls (one write makes one segment per shard whatever the cap, so only a batched load has
    an ingested store's layout), reports the segments it searched, and still finds the exact
    top 10."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.ann_stores", "--worker", "edge_sentences", "3000"]
        + ["--sentences", "2", "--queries", "5", "--writes", "3", "--work", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("BENCH-RESULT "))
    rows = json.loads(line.split(" ", 1)[1])["rows"]  # one per search beam
    for row in rows:
        assert row["writes"] == 3
        passage_segments, sentence_segments = row["segments"]
        assert passage_segments >= 1 and sentence_segments >= 1
        assert row["recall_at_10"] >= 0.9
