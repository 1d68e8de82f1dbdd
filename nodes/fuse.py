"""Reciprocal rank fusion over every branch, and the node that applies it.

``score(d) = sum over branches containing d of w_branch / (k + rank)``, ranks 1-based. Branches
arrive in no fixed order (parallel writes), so they are first put in (view, retriever) order;
that order decides which copy of a duplicate is kept and which document "appeared first".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from parallel_rag.nodes.records import (
    BranchRecord,
    BranchResult,
    FusedDocument,
    SourceRecord,
)

DEFAULT_RRF_K = 60


def order_branches(branches: Iterable[BranchResult]) -> list[BranchResult]:
    """View order, then retriever order: the deterministic order fusion reads branches in."""
    return sorted(branches, key=lambda b: (b["view_index"], b["retriever_index"]))


def reciprocal_rank_fusion(
    branches: Iterable[BranchResult],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    top_k: int | None = None,
) -> list[FusedDocument]:
    """Fuse ranked branch lists into one list with every source kept.

    Duplicates share an ``id``; the first copy seen is kept. Ties go to the better best-rank,
    then to the earlier first appearance. ``weights`` are per retriever name (default 1).
    """
    if k <= 0:
        raise ValueError(f"fusion k must be > 0, got {k}")
    weights = weights or {}
    fused: dict[str, dict[str, Any]] = {}
    for branch in order_branches(branches):
        weight = float(weights.get(branch["retriever"], 1.0))
        for hit in sorted(branch["hits"], key=lambda h: h["rank"]):
            entry = fused.get(hit["id"])
            if entry is None:
                entry = fused[hit["id"]] = {
                    "id": hit["id"],
                    "content": hit["content"],
                    "metadata": hit["metadata"],
                    "score": 0.0,
                    "best_rank": hit["rank"],
                    "first_seen": len(fused),
                    "sources": [],
                }
            entry["score"] += weight / (k + hit["rank"])
            entry["best_rank"] = min(entry["best_rank"], hit["rank"])
            source: SourceRecord = {
                "branch": branch["branch"],
                "view": branch["view"],
                "view_kind": branch["view_kind"],
                "retriever": branch["retriever"],
                "rank": hit["rank"],
                "score": hit["score"],
            }
            if "rerank_score" in hit:
                source["rerank_score"] = hit["rerank_score"]
            entry["sources"].append(source)

    ranked = sorted(fused.values(), key=lambda e: (-e["score"], e["best_rank"], e["first_seen"]))
    if top_k is not None:
        ranked = ranked[:top_k]
    return [
        FusedDocument(
            id=e["id"],
            content=e["content"],
            metadata=e["metadata"],
            fused_score=e["score"],
            fused_rank=position,
            sources=e["sources"],
        )
        for position, e in enumerate(ranked, start=1)
    ]


def branch_records(branches: Iterable[BranchResult]) -> list[BranchRecord]:
    """The result's per-branch account, in (view, retriever) order."""
    return [
        BranchRecord(
            branch=b["branch"],
            view=b["view"],
            view_kind=b["view_kind"],
            retriever=b["retriever"],
            status=b["status"],
            hits=len(b["hits"]),
            latency_ms=round(b["latency_ms"], 3),
            error=b["error"],
            fallback_used=bool(b.get("fallback_used", False)),
            served_by=b.get("served_by", b["retriever"]),
            fallback_reason=b.get("fallback_reason"),
            rerank_ms=b.get("rerank_ms"),
        )
        for b in order_branches(branches)
    ]


def views_used(branches: Iterable[BranchResult]) -> list[dict[str, str]]:
    """The query views that actually reached a retriever, in view order."""
    seen: dict[int, dict[str, str]] = {}
    for b in order_branches(branches):
        seen.setdefault(b["view_index"], {"text": b["view"], "kind": b["view_kind"]})
    return list(seen.values())


FusionSettings = Callable[[Mapping[str, Any], int, Mapping[str, float]], tuple[int, Mapping]]


def make_fuse_node(*, k: int, weights: Mapping[str, float], settings: FusionSettings | None = None):
    """The ``fuse`` node: RRF over the branch results, cut to the request's ``top_k``.
    ``settings(state, k, weights)`` may adjust ``k`` and the weights per run (the knobs)."""

    def fuse(state: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        run_k, run_weights = settings(state, k, weights) if settings else (k, weights)
        results: list[BranchResult] = state.get("branch_results") or []
        documents = reciprocal_rank_fusion(
            results, k=run_k, weights=run_weights, top_k=state["top_k"]
        )
        return {
            "documents": documents,
            "branches": branch_records(results),
            "queries": views_used(results),
            "warnings": [b["warning"] for b in order_branches(results) if b.get("warning")],
            "timings": {"fuse": (time.perf_counter() - started) * 1000},
        }

    return fuse
