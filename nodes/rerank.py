"""The ``rerank`` node: one task per branch, scoring its candidates against the ORIGINAL query.

Higher score first; equal scores keep retrieval order (a stable sort). Ids and retrieval scores
stay as they were; the rerank score is added and the branch rank becomes the reranked position.
Scorer problems (missing model, non-finite scores, token-budget refusals) follow ``on_failure``.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

from parallel_rag.nodes.errors import BlockedError
from parallel_rag.nodes.records import BranchHit, BranchResult, FailurePolicy
from parallel_rag.nodes.retrieve import describe_error


class PairScorer(Protocol):
    """Anything that scores (query, document) pairs; higher means more relevant."""

    def score(self, query: str, documents: list[str]) -> list[float]: ...


def rerank_hits(hits: list[BranchHit], scores: list[float], top_k: int | None) -> list[BranchHit]:
    """Reorder ``hits`` by ``scores`` (stable on ties) and keep ``top_k`` (all when None)."""
    if len(scores) != len(hits):
        raise ValueError(f"scorer returned {len(scores)} scores for {len(hits)} documents")
    bad = [s for s in scores if not isinstance(s, int | float) or not math.isfinite(s)]
    if bad:
        raise ValueError(f"scorer returned non-finite scores: {bad[:3]}")
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    if top_k is not None:
        order = order[:top_k]
    return [
        BranchHit(**{**hits[i], "rank": position, "rerank_score": float(scores[i])})
        for position, i in enumerate(order, start=1)
    ]


def make_rerank_node(scorer: PairScorer, *, top_k: int | None, on_failure: FailurePolicy):
    """The ``rerank`` node bound to one shared scorer (loaded once per process)."""

    def rerank(task: dict[str, Any]) -> dict[str, Any]:
        result: BranchResult = dict(task["result"])  # type: ignore[assignment]
        if result["status"] != "ok":
            return {"branch_results": [result]}
        started = time.perf_counter()
        try:
            scores = scorer.score(task["query"], [h["content"] for h in result["hits"]])
            result["hits"] = rerank_hits(result["hits"], list(scores), top_k)
        except Exception as exc:
            message = describe_error(exc)
            if on_failure == "block":
                raise BlockedError(f"reranker on branch '{result['branch']}'", message) from exc
            if on_failure == "warn":
                note = f"reranker failed on branch '{result['branch']}', kept retrieval order: "
                result["warning"] = "; ".join(filter(None, [result["warning"], note + message]))
        elapsed = (time.perf_counter() - started) * 1000
        result["rerank_ms"] = elapsed
        return {"branch_results": [result], "timings": {"rerank": elapsed}}

    return rerank
