"""Fusion over every branch, and the node that applies it.

Every method sums, over the branches that returned a document, ``w_retriever * c(hit)``:

- ``rrf`` (reciprocal rank fusion): ``c = 1 / (k + rank)``, ranks 1-based;
- ``minmax``: the branch's scores scaled to [0, 1] by its lowest and highest retrieved score;
- ``zscore``: ``(score - lowest) / std``, the branch's z-scores shifted so its lowest retrieved
  hit counts 0 (a document a branch did not return counts like its worst hit, not like an
  average one);
- ``dbsf`` (distribution-based score fusion, as Qdrant does it): scores scaled so that
  ``mean - 3 std`` maps to 0 and ``mean + 3 std`` to 1 (sample std, no clipping).

A document a branch did not return adds nothing from that branch. The normalised methods are a
convex combination of per-branch scores (weights need not sum to 1: only their ratios change the
order). A branch reranked before fusion is normalised on its rerank scores (the order it is in);
its unscored tail counts 0. A branch whose scores are missing, not finite, or not descending with
rank (a foreign retriever, a distance instead of a similarity) is normalised on reciprocal-rank
pseudo-scores ``1 / (k + rank)`` instead, so it still takes part with its order. A branch whose
scores do not spread (one hit, all equal) gives each hit 1, the branch's best: a lexical branch
whose only hit is the one document holding a rare query term counts it in full. (Qdrant gives
such hits 0.5; at 0.5 that lone lexical hit falls out of the fused top 3 of the example questions
once the dense branch scores sentences too, and no training query has such a branch.)

Branches arrive in no fixed order (parallel writes), so they are first put in (view, retriever)
order; that order decides which copy of a duplicate is kept and which document "appeared first".
Ties go to the better best-rank, then to the earlier first appearance.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import ge, itemgetter
from typing import Any, Literal, get_args

from langgraph.runtime import Runtime
from parallel_rag.nodes.contextualize.records import first_turn_record
from parallel_rag.nodes.knobs import knob
from parallel_rag.nodes.records import (
    BranchHit,
    BranchRecord,
    BranchResult,
    FusedDocument,
    SourceRecord,
)

FusionMethod = Literal["rrf", "minmax", "zscore", "dbsf"]
FUSION_METHODS: tuple[str, ...] = get_args(FusionMethod)
DEFAULT_RRF_K = 60
# The shipped defaults, chosen on training data only (SciFact train nDCG@10 and HotpotQA dev's
# first 100 questions AllSupport@10, BM25 + all-MiniLM-L6-v2; bench/fusion_methods.py): min-max
# normalised scores, each dense (vector) retriever weighted 0.75 against 1 for the others. The
# training optimum (0.4) loses the example questions only the dense retriever finds; 0.75 is the
# best training mean that keeps every lexical-only and dense-only example question in the top 3.
DEFAULT_FUSION_METHOD: FusionMethod = "minmax"
DEFAULT_FUSION_K = DEFAULT_RRF_K
DEFAULT_DENSE_WEIGHT = 0.75
FLAT_SCORE = 1.0  # every hit of a branch whose scores do not spread: each is its best


def method_for_k(method: str | None, *, k_given: bool, k_path: str, method_path: str) -> str | None:
    """The fusion method asked for beside a ``k``: the one rule the configuration file's
    ``fusion:`` block and a run's ``fusion_k`` / ``fusion_method`` knobs both follow.

    A ``k`` without a method (``method`` None) asks for RRF (``fusion: {k: 60}``); a ``k`` beside a
    score method is refused, as it would go unused, so settings written for RRF never fuse
    another way in silence. Without a ``k`` the method is returned as given.

    ``k_path`` and ``method_path`` are the fields as the user writes them (``fusion.k``,
    ``fusion_k``); the refusal says which to drop or set, and calls ``k`` by its own field
    name (the last part of ``k_path``), so it reads right wherever the caller places it."""
    if not k_given:
        return method
    if method is None:
        return "rrf"
    if method != "rrf":
        k_name = k_path.rpartition(".")[2]
        raise ValueError(
            f"{k_name} is the RRF constant, and {method_path} is {method!r}: drop {k_path}, "
            f"or set {method_path}: rrf"
        )
    return method


def order_branches(branches: Iterable[BranchResult]) -> list[BranchResult]:
    """View order, then retriever order: the deterministic order fusion reads branches in."""
    return sorted(branches, key=lambda b: (b["view_index"], b["retriever_index"]))


_RANK = itemgetter("rank")


def _finite(value: Any) -> bool:
    if value.__class__ is float:  # nearly every score: one check instead of three
        return math.isfinite(value)
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def branch_scores(hits: Sequence[BranchHit], *, k: int = DEFAULT_RRF_K) -> list[float | None]:
    """The raw score each hit (in rank order) is normalised from; ``None`` for an unscored tail.

    Rerank scores when the branch was reranked, else retrieval scores; reciprocal-rank
    pseudo-scores ``1 / (k + rank)`` when those are unusable (missing in the middle, not finite,
    or not descending with rank)."""
    key = "rerank_score" if any("rerank_score" in h for h in hits) else "score"
    values = [h.get(key) for h in hits]
    head = 0
    for value in values:
        if not _finite(value):
            break
        head += 1
    usable = (
        head > 0
        and all(v is None for v in values[head:])
        and all(map(ge, values[: head - 1], values[1:head]))  # descending with rank
    )
    if not usable:
        return [1.0 / (k + h["rank"]) for h in hits]
    return [float(v) for v in values[:head]] + [None] * (len(values) - head)


def normalise(scores: Sequence[float | None], method: str) -> list[float]:
    """Per-branch normalisation of ``branch_scores`` (``None`` counts 0)."""
    present = [s for s in scores if s is not None]
    if method == "rrf":
        raise ValueError("rrf reads ranks, not scores")
    lowest = min(present, default=None)
    if len(present) < 2 or max(present) == lowest:
        return [FLAT_SCORE if s is not None else 0.0 for s in scores]
    if method == "minmax":
        low, spread = lowest, max(present) - lowest
    else:
        mean = sum(present) / len(present)
        std = math.sqrt(sum((s - mean) ** 2 for s in present) / (len(present) - 1))
        if method == "zscore":
            low, spread = lowest, std
        elif method == "dbsf":
            low, spread = mean - 3 * std, 6 * std
        else:
            raise ValueError(f"unknown fusion method {method!r}; expected one of {FUSION_METHODS}")
    return [(s - low) / spread if s is not None else 0.0 for s in scores]


def _contributions(hits: list[BranchHit], method: str, k: int) -> list[float]:
    if method == "rrf":
        return [1.0 / (k + h["rank"]) for h in hits]
    return normalise(branch_scores(hits, k=k), method)


def fuse_branches(
    branches: Iterable[BranchResult],
    *,
    method: str = DEFAULT_FUSION_METHOD,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    top_k: int | None = None,
) -> list[FusedDocument]:
    """Fuse ranked branch lists into one list with every source kept, by ``method``.

    Duplicates share an ``id``; the first copy seen is kept. ``weights`` are per retriever name
    (default 1). ``k`` is RRF's constant, and the rank offset of pseudo-scores for branches
    without usable scores in the normalised methods."""
    if method not in FUSION_METHODS:
        raise ValueError(f"unknown fusion method {method!r}; expected one of {FUSION_METHODS}")
    if k <= 0:
        raise ValueError(f"fusion k must be > 0, got {k}")
    weights = weights or {}
    fused: dict[str, dict[str, Any]] = {}
    for branch in order_branches(branches):
        retriever = branch["retriever"]
        weight = float(weights.get(retriever, 1.0))
        key, view, view_kind = branch["branch"], branch["view"], branch["view_kind"]
        hits = sorted(branch["hits"], key=_RANK)
        for hit, contribution in zip(hits, _contributions(hits, method, k), strict=True):
            hit_id, rank = hit["id"], hit["rank"]
            entry = fused.get(hit_id)
            if entry is None:
                entry = fused[hit_id] = {
                    "id": hit_id,
                    "content": hit["content"],
                    "metadata": hit["metadata"],
                    "score": 0.0,
                    "best_rank": rank,
                    "first_seen": len(fused),
                    "sources": [],
                }
            elif rank < entry["best_rank"]:
                entry["best_rank"] = rank
            entry["score"] += weight * contribution
            source: SourceRecord = {
                "branch": key,
                "view": view,
                "view_kind": view_kind,
                "retriever": retriever,
                "rank": rank,
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


def reciprocal_rank_fusion(
    branches: Iterable[BranchResult],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    top_k: int | None = None,
) -> list[FusedDocument]:
    """RRF: ``score(d) = sum over branches containing d of w_branch / (k + rank)``."""
    return fuse_branches(branches, method="rrf", k=k, weights=weights, top_k=top_k)


def score_fusion(
    branches: Iterable[BranchResult],
    *,
    method: str = "dbsf",
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    top_k: int | None = None,
) -> list[FusedDocument]:
    """Weighted sum of per-branch normalised scores (``minmax``, ``zscore`` or ``dbsf``)."""
    if method == "rrf":
        raise ValueError("score_fusion: method must be a score normalisation, not rrf")
    return fuse_branches(branches, method=method, k=k, weights=weights, top_k=top_k)


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


@dataclass(frozen=True)
class FusionPlan:
    """The fusion a run applies and where its settings came from (``source``): ``default``
    (the shipped settings: the configuration sets no ``fusion:`` and no fit is in use),
    ``configuration`` (its ``fusion:`` block), ``fitted`` (``studio/fusion_fit.py``'s choice
    for this corpus, read from beside the stores) or ``run`` (the run's fusion knobs over the
    configured settings). ``note`` says why a default is in use; ``fit`` is the fit's evidence
    in brief. ``account`` is what the result reports as ``fusion``."""

    method: str = DEFAULT_FUSION_METHOD
    k: int = DEFAULT_RRF_K
    weights: Mapping[str, float] = field(default_factory=dict)
    source: str = "default"
    note: str | None = None
    fit: Mapping[str, Any] | None = None

    def account(self, retrievers: Iterable[str] = ()) -> dict[str, Any]:
        """The result's ``fusion``: the weight of each of ``retrievers`` (1 unless set) and
        of any other retriever the plan names."""
        out: dict[str, Any] = {"method": self.method}
        if self.method == "rrf":
            out["k"] = self.k
        out["weights"] = {**dict.fromkeys(retrievers, 1.0), **self.weights}
        out["source"] = self.source
        if self.note:
            out["note"] = self.note
        if self.fit:
            out["fit"] = dict(self.fit)
        return out


def make_fuse_node(
    *,
    k: int,
    weights: Mapping[str, float],
    method: str = DEFAULT_FUSION_METHOD,
    source: str = "configuration",
    plan: Callable[[], FusionPlan] | None = None,
):
    """The ``fuse`` node: ``method`` fusion over the branch results, cut to the request's
    ``top_k``. The run's knobs (``fusion_k``, ``fusion_weights``, ``fusion_method`` in the
    injected ``runtime.context``) adjust the configured settings for that run. A run that
    sets none fuses by ``plan()`` when given (the fitted settings, re-read when a fit is
    written), else by the configured settings (``source`` says whose they are). The result's
    ``fusion`` says which settings fused it and why."""
    if method not in FUSION_METHODS:
        raise ValueError(f"unknown fusion method {method!r}; expected one of {FUSION_METHODS}")
    configured = FusionPlan(method, k, dict(weights), source)

    def run_plan(runtime: Runtime[Any] | None) -> FusionPlan:
        run_k = knob(runtime, "fusion_k")
        run_weights = knob(runtime, "fusion_weights")
        run_method = knob(runtime, "fusion_method")
        if run_k is None and run_weights is None and run_method is None:
            return plan() if plan is not None else configured
        return replace(
            configured,
            k=run_k or k,
            weights={**weights, **(run_weights or {})},
            method=run_method or method,
            source="run",
        )

    def fuse(state: dict[str, Any], runtime: Runtime[Any] | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        chosen = run_plan(runtime)
        results: list[BranchResult] = state.get("branch_results") or []
        documents = fuse_branches(
            results,
            method=chosen.method,
            k=chosen.k,
            weights=chosen.weights,
            top_k=state["top_k"],
        )
        return {
            # what was retrieved on: a first turn (no contextualize) retrieves the question as is
            "resolution": state.get("resolution") or first_turn_record(state["query"]),
            "documents": documents,
            "fusion": chosen.account(
                dict.fromkeys(b["retriever"] for b in order_branches(results))
            ),
            "branches": branch_records(results),
            "queries": views_used(results),
            "warnings": [b["warning"] for b in order_branches(results) if b.get("warning")],
            "timings": {"fuse": (time.perf_counter() - started) * 1000},
        }

    return fuse
