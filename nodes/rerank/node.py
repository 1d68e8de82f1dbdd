"""The ``rerank`` node: one task per branch, scoring its candidates against the ORIGINAL query.

Higher score first; equal scores keep retrieval order (a stable sort). Ids and retrieval scores
stay as they were; the rerank score is added and the branch rank becomes the reranked position.
``max_candidates`` bounds the cost: only a branch's first N hits are scored, the rest follow them
unscored, in retrieval order. ``top_k`` then keeps the best N (all when None).
Scorer problems (missing model, non-finite scores, token-budget refusals) follow ``on_failure``:
the branch keeps its retrieval order (``skip``), plus a warning (``warn``), or the request
stops (``block``). The branch records its rerank latency (``rerank_ms``).
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Protocol

from parallel_rag.nodes.failure_policy import FailurePolicy, attempt
from parallel_rag.nodes.records import BranchHit, BranchResult


class PairScorer(Protocol):
    """Anything that scores (query, document) pairs; higher means more relevant."""

    def score(self, query: str, documents: list[str]) -> list[float]: ...


def scored_count(hits: list[BranchHit], max_candidates: int | None) -> int:
    """How many of a branch's hits the scorer sees: the first ``max_candidates``."""
    return len(hits) if max_candidates is None else min(len(hits), max_candidates)


def rerank_hits(
    hits: list[BranchHit],
    scores: list[float],
    top_k: int | None,
    *,
    max_candidates: int | None = None,
) -> list[BranchHit]:
    """Reorder the scored head of ``hits`` by ``scores`` (stable on ties), append the unscored
    tail in retrieval order, and keep ``top_k`` (all when None). ``hits`` is not modified."""
    scored = scored_count(hits, max_candidates)
    if len(scores) != scored:
        raise ValueError(f"scorer returned {len(scores)} scores for {scored} documents")
    bad = [s for s in scores if not isinstance(s, numbers.Real) or not math.isfinite(s)]
    if bad:
        raise ValueError(f"scorer returned non-finite scores: {bad[:3]}")
    order = sorted(range(scored), key=lambda i: -scores[i]) + list(range(scored, len(hits)))
    if top_k is not None:
        order = order[:top_k]
    reranked = []
    for position, i in enumerate(order, start=1):
        hit = BranchHit(**{**hits[i], "rank": position})
        if i < scored:
            hit["rerank_score"] = float(scores[i])
        reranked.append(hit)
    return reranked


def make_rerank_node(
    scorer: PairScorer,
    *,
    top_k: int | None,
    on_failure: FailurePolicy,
    max_candidates: int | None = None,
):
    """The ``rerank`` node bound to one shared scorer (loaded once per process)."""

    def rerank(task: dict[str, Any]) -> dict[str, Any]:
        result: BranchResult = dict(task["result"])  # type: ignore[assignment]
        if result["status"] != "ok":
            return {"branch_results": [result]}
        started = time.perf_counter()
        hits = result["hits"]

        def reranked() -> list[BranchHit]:
            candidates = [h["content"] for h in hits[: scored_count(hits, max_candidates)]]
            scores = list(scorer.score(task["query"], candidates))
            return rerank_hits(hits, scores, top_k, max_candidates=max_candidates)

        done = attempt(
            reranked,
            on_failure,
            f"reranker on branch '{result['branch']}'",
            warning=f"reranker failed on branch '{result['branch']}', kept retrieval order",
        )
        if not done.failed:
            result["hits"] = done.value
        result["warning"] = "; ".join(filter(None, [result["warning"], *done.warnings]))
        elapsed = (time.perf_counter() - started) * 1000
        result["rerank_ms"] = elapsed
        return {"branch_results": [result], "timings": {"rerank": elapsed}}

    return rerank
