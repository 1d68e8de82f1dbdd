"""Latency: fan-out over branches with a fixed artificial delay, the graph's retrieval-path
overhead against a hand-written ``asyncio.gather`` + RRF and against ``EnsembleRetriever``, and
per-node timings from the result's ``timings``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever
from parallel_rag.studio.evaluation import DOC_ID_KEY

from bench.measure import pct, summary_ms
from bench.quality import ensemble_of

CHEAP_GENERATOR = {"kind": "extractive", "min_similarity": None}


class DelayRetriever(BaseRetriever):
    """A branch that sleeps a fixed time (``time.sleep`` / ``asyncio.sleep``) and returns fixed
    documents: it isolates the orchestration cost from any real search."""

    delay_s: float = 0.1
    tag: str = "r"
    hits: int = 10

    def _docs(self) -> list[Document]:
        # half of each list is shared with the other branches, so fusion has duplicates to merge
        return [
            Document(
                id=f"{'shared' if i % 2 else self.tag}-{i}",
                page_content=f"document {i} of {self.tag}",
                metadata={DOC_ID_KEY: f"{self.tag}-{i}"},
            )
            for i in range(self.hits)
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        time.sleep(self.delay_s)
        return self._docs()

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        await asyncio.sleep(self.delay_s)
        return self._docs()


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
    """Wall time per request of the graph (invoke / ainvoke) and EnsembleRetriever (invoke /
    ainvoke) over N delay branches, against the sum and the max of the delays."""
    rows = []
    loop = asyncio.new_event_loop()
    try:
        for n in branch_counts:
            retrievers = {
                f"r{i}": DelayRetriever(delay_s=delay_ms / 1000, tag=f"r{i}") for i in range(n)
            }
            graph = build_graph({"generator": CHEAP_GENERATOR}, retrievers=retrievers)
            ensemble = ensemble_of(retrievers)
            request = {"query": "fan-out probe", "top_k": 5}
            calls = {
                "graph.invoke": lambda g=graph, r=request: g.invoke(r),
                "EnsembleRetriever.invoke": lambda e=ensemble: e.invoke("fan-out probe"),
            }
            acalls = {
                "graph.ainvoke": lambda g=graph, r=request: g.ainvoke(r),
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


def rrf_by_hand(lists: list[list[Document]], k: int, top_k: int) -> list[Document]:
    """What a user would write: RRF over ids, first copy kept."""
    scores: dict[str, float] = {}
    first: dict[str, Document] = {}
    for docs in lists:
        for rank, doc in enumerate(docs, start=1):
            key = doc.id or doc.page_content
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            first.setdefault(key, doc)
    ranked = sorted(scores, key=lambda key: -scores[key])[:top_k]
    return [first[key] for key in ranked]


def overhead(
    lexical: BaseRetriever,
    dense: BaseRetriever,
    queries: list[str],
    *,
    top_k: int = 10,
    fusion_k: int = 60,
    log=print,
) -> dict[str, Any]:
    """Per query: the graph's retrieval path (``ParallelFusionRetriever``: the compiled graph
    stopped after ``fuse``; no rewriter, no generation) sync and async, a hand-written
    ``asyncio.gather`` of the same two retriever objects + the same RRF, and EnsembleRetriever
    (sync, async) on the same objects. Every method asks each retriever for ``2 * top_k``."""
    depth = 2 * top_k
    graph = build_graph(
        {"generator": CHEAP_GENERATOR, "fusion": {"k": fusion_k}},
        retrievers={"lexical": lexical, "dense": dense},
    )
    fused = ParallelFusionRetriever(graph=graph, top_k=top_k)
    # EnsembleRetriever passes no k: give it retrievers that already return ``depth`` hits
    ens_lexical = lexical.model_copy(update={"k": depth})
    ens_dense = dense.model_copy(update={"k": depth})
    ensemble = ensemble_of({"lexical": ens_lexical, "dense": ens_dense}, c=fusion_k)

    async def gather_rrf(query: str) -> list[Document]:
        lists = await asyncio.gather(
            asyncio.to_thread(lexical.invoke, query, k=depth),
            asyncio.to_thread(dense.invoke, query, k=depth),
        )
        return rrf_by_hand(list(lists), fusion_k, top_k)

    methods_sync = {
        "graph retrieval path (invoke)": lambda q: fused.invoke(q),
        "EnsembleRetriever.invoke": lambda q: ensemble.invoke(q)[:top_k],
    }
    methods_async = {
        "graph retrieval path (ainvoke)": lambda q: fused.ainvoke(q),
        "asyncio.gather + RRF (hand-written)": gather_rrf,
        "EnsembleRetriever.ainvoke": lambda q: ensemble.ainvoke(q),
    }
    times: dict[str, list[float]] = {name: [] for name in [*methods_sync, *methods_async]}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    agree = 0
    loop = asyncio.new_event_loop()
    try:
        for q in queries[:3]:  # warm-up: index loads, first compile
            for call in methods_sync.values():
                call(q)
            for acall in methods_async.values():
                loop.run_until_complete(acall(q))
        for q in queries:
            for name, call in methods_sync.items():
                times[name].append(_timed(lambda c=call, q=q: c(q), cpu[name]))
            for name, acall in methods_async.items():
                times[name].append(
                    loop.run_until_complete(_atimed(lambda c=acall, q=q: c(q), cpu[name]))
                )
            graph_ids = [d.id for d in fused.invoke(q)]
            hand_ids = [d.id for d in loop.run_until_complete(gather_rrf(q))]
            agree += graph_ids == hand_ids
    finally:
        loop.close()
    stats = {name: summary_ms(v) for name, v in times.items()}
    base = stats["asyncio.gather + RRF (hand-written)"]
    base_cpu = pct(cpu["asyncio.gather + RRF (hand-written)"], 50)
    for name, s in stats.items():
        s["ratio_p50"] = s["p50"] / base["p50"]
        s["ratio_p95"] = s["p95"] / base["p95"]
        s["cpu_p50"] = pct(cpu[name], 50)
        s["cpu_ratio_p50"] = s["cpu_p50"] / base_cpu if base_cpu else float("nan")
        log(
            f"[overhead] {name}: p50 {s['p50']:.2f} ms p95 {s['p95']:.2f} ms "
            f"(x{s['ratio_p50']:.2f} of gather p50)"
        )
    return {
        "queries": len(queries),
        "top_k": top_k,
        "depth": depth,
        "stats": stats,
        "same_top_k": agree / max(len(queries), 1),
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
