"""Latency: fan-out over branches with a fixed artificial delay, the product's retrieval path
(``ParallelFusionRetriever``) against a hand-written pipeline, LangGraph's own floor and
``EnsembleRetriever`` on real branches (``bench/orchestration.py``'s methods and round-robin
measurement), and per-node timings from the result's ``timings``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from langchain_core.retrievers import BaseRetriever
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever

from bench import orchestration
from bench.baselines import DelayRetriever, ensemble_of
from bench.measure import pct, summary_ms

CHEAP_GENERATOR = {"kind": "extractive", "min_similarity": None}


def _timed(call: Callable[[], Any], cpu: list[float] | None = None) -> float:
    started, started_cpu = time.perf_counter(), time.process_time()
    call()
    if cpu is not None:
        cpu.append((time.process_time() - started_cpu) * 1000)
    return (time.perf_counter() - started) * 1000


async def _atimed(call: Callable[[], Any], cpu: list[float] | None = None) -> float:
    started, started_cpu = time.perf_counter(), time.process_time()
    await call()
    if cpu is not None:
        cpu.append((time.process_time() - started_cpu) * 1000)
    return (time.perf_counter() - started) * 1000


def fanout(
    branch_counts=(2, 3, 4), delay_ms: float = 100.0, reps: int = 15, log=print
) -> dict[str, Any]:
    """Wall time per request of the whole graph (invoke / ainvoke), its retrieval path
    (``ParallelFusionRetriever`` invoke / ainvoke) and EnsembleRetriever (invoke / ainvoke) over
    N delay branches, against the sum and the max of the delays."""
    rows = []
    loop = asyncio.new_event_loop()
    try:
        for n in branch_counts:
            retrievers = {
                f"r{i}": DelayRetriever(delay_s=delay_ms / 1000, tag=f"r{i}") for i in range(n)
            }
            graph = build_graph({"generator": CHEAP_GENERATOR}, retrievers=retrievers)
            path = ParallelFusionRetriever(graph=graph, top_k=5)
            ensemble = ensemble_of(retrievers)
            request = {"query": "fan-out probe", "top_k": 5}
            calls = {
                "graph.invoke": lambda g=graph, r=request: g.invoke(r),
                "ParallelFusionRetriever.invoke": lambda p=path: p.invoke("fan-out probe"),
                "EnsembleRetriever.invoke": lambda e=ensemble: e.invoke("fan-out probe"),
            }
            acalls = {
                "graph.ainvoke": lambda g=graph, r=request: g.ainvoke(r),
                "ParallelFusionRetriever.ainvoke": lambda p=path: p.ainvoke("fan-out probe"),
                "EnsembleRetriever.ainvoke": lambda e=ensemble: e.ainvoke("fan-out probe"),
            }
            for call in calls.values():  # warm-up (imports, first compile paths)
                call()
            for acall in acalls.values():
                loop.run_until_complete(acall())
            times: dict[str, list[float]] = {name: [] for name in [*calls, *acalls]}
            for _ in range(reps):  # round robin: load changes hit every method alike
                for name, call in calls.items():
                    times[name].append(_timed(call))
                for name, acall in acalls.items():
                    times[name].append(loop.run_until_complete(_atimed(acall)))
            row = {
                "branches": n,
                "delay_ms": delay_ms,
                "sum_ms": n * delay_ms,
                "max_ms": delay_ms,
                **{f"{name} p50": pct(v, 50) for name, v in times.items()},
                **{f"{name} p95": pct(v, 95) for name, v in times.items()},
            }
            rows.append(row)
            log(
                f"[fanout] {n} branches x {delay_ms:.0f} ms: "
                + ", ".join(f"{name} p50 {pct(v, 50):.0f} ms" for name, v in times.items())
            )
    finally:
        loop.close()
    return {"rows": rows, "reps": reps, "delay_ms": delay_ms}


HAND_WRITTEN = "hand-written ThreadPool + RRF (sync)"
"""The baseline of the overhead ratios: what a user writes without a framework."""


def overhead(retrievers: dict[str, BaseRetriever], queries: list[str], log=print) -> dict[str, Any]:
    """Per request, over the same retriever objects and round robin (one request in flight):
    every method of ``bench.orchestration`` (the product's ``ParallelFusionRetriever`` invoke and
    ainvoke, the hand-written thread pool and ``asyncio.gather`` + RRF, LangGraph's floor graph,
    ``EnsembleRetriever`` invoke and ainvoke) and each branch alone, each call a query text no
    method has asked before (the dense branch's query encode is real every time). Wall p50/p95
    and process CPU per request, and each as a multiple of the hand-written pool's."""
    results = orchestration.measure(orchestration.scifact_calls(retrievers), queries, unique=True)
    base = results.get(HAND_WRITTEN) or next(iter(results.values()))
    stats = {}
    for name, r in results.items():
        stats[name] = {
            **r,
            "ratio_p50": r["p50"] / base["p50"],
            "ratio_p95": r["p95"] / base["p95"],
            "cpu_ratio_p50": r["cpu"] / base["cpu"] if base["cpu"] else float("nan"),
        }
        log(
            f"[overhead] {name}: p50 {r['p50']:.2f} ms p95 {r['p95']:.2f} ms CPU {r['cpu']:.2f} ms"
            f" (x{stats[name]['ratio_p50']:.2f} of the hand-written p50)"
        )
    return {
        "queries": len(queries),
        "top_k": orchestration.TOP_K,
        "depth": orchestration.DEPTH,
        "fusion_k": orchestration.FUSION_K,
        "baseline": HAND_WRITTEN if HAND_WRITTEN in results else next(iter(results)),
        "stats": stats,
    }


def per_node(graph, queries: list[str], top_k: int = 5, log=print) -> dict[str, Any]:
    """Median / p95 per node over ``graph.invoke`` results' ``timings`` (ms), plus wall time."""
    graph.invoke({"query": queries[0], "top_k": top_k})  # warm-up: model and index loads
    timings: dict[str, list[float]] = {}
    wall: list[float] = []
    for q in queries:
        started = time.perf_counter()
        result = graph.invoke({"query": q, "top_k": top_k})
        wall.append((time.perf_counter() - started) * 1000)
        for node, ms in result["timings"].items():
            timings.setdefault(node, []).append(ms)
    rows = [{"node": node, **summary_ms(v)} for node, v in timings.items()]
    rows.append({"node": "(wall, graph.invoke)", **summary_ms(wall)})
    for row in rows:
        log(f"[nodes] {row['node']}: p50 {row['p50']:.1f} ms p95 {row['p95']:.1f} ms")
    return {"rows": rows, "queries": len(queries), "top_k": top_k}
