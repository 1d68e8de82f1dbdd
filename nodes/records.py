"""Value shapes the nodes exchange; the graph's state composes them.

They live beside the nodes (not in ``graph/``) because imports run one way: graph -> nodes.
All are plain ``TypedDict``s so they serialise as JSON in every surface (CLI, LangServe, Studio).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

# typing_extensions' TypedDict: pydantic (LangServe/Studio output schemas) refuses typing's on 3.11
from typing_extensions import TypedDict

ViewKind = Literal["original", "rewrite", "hyde", "expansion", "follow_up"]
BranchStatus = Literal["ok", "empty", "failed", "skipped"]


class QueryView(TypedDict):
    """One query text sent to the retrievers, and where it came from."""

    index: int
    text: str
    kind: ViewKind


class BranchHit(TypedDict):
    """One retrieved candidate inside a branch, before fusion."""

    id: str
    content: str
    metadata: dict[str, Any]
    rank: int
    score: float | None
    rerank_score: NotRequired[float]


class BranchResult(TypedDict):
    """Everything one (view, retriever) branch produced, keyed so arrival order never matters."""

    branch: str
    view_index: int
    view: str
    view_kind: ViewKind
    retriever: str
    retriever_index: int
    status: BranchStatus
    hits: list[BranchHit]
    latency_ms: float
    error: str | None
    warning: str | None
    served_by: NotRequired[str]
    fallback_used: NotRequired[bool]
    fallback_reason: NotRequired[str | None]
    rerank_ms: NotRequired[float]


class SourceRecord(TypedDict):
    """Where a fused document was found: one entry per branch that returned it."""

    branch: str
    view: str
    view_kind: ViewKind
    retriever: str
    rank: int
    score: float | None
    rerank_score: NotRequired[float]


class FusedDocument(TypedDict):
    """A document of the fused list handed to the generator."""

    id: str
    content: str
    metadata: dict[str, Any]
    fused_score: float
    fused_rank: int
    sources: list[SourceRecord]


class BranchRecord(TypedDict):
    """The result's account of one branch: what ran, what it found, what went wrong."""

    branch: str
    view: str
    view_kind: ViewKind
    retriever: str
    status: BranchStatus
    hits: int
    latency_ms: float
    error: str | None
    fallback_used: bool
    served_by: str
    fallback_reason: str | None
    rerank_ms: float | None


class Citation(TypedDict):
    """One evidence block the answer cites, by its number in the prompt, and where in its file
    it sits when the file has structure: ``page`` (PDF, 1-based; ``page_end`` when a chunk
    spans pages), ``slide`` (PPTX), ``section`` (heading path)."""

    number: int
    id: str
    source: str | None
    page: NotRequired[int]
    page_end: NotRequired[int]
    slide: NotRequired[int]
    section: NotRequired[str]


def branch_key(view_index: int, retriever: str) -> str:
    """The stable name of a (view, retriever) branch."""
    return f"q{view_index}:{retriever}"


ResolutionMethod = Literal["as_written", "carry_over", "chat_model"]


class ResolutionRecord(TypedDict):
    """What a run retrieved on, and why: the ``question`` as the user wrote it, the question
    the branches searched (``retrieved_on``), how it was written (``as_written``: nothing to
    resolve; ``carry_over``: the subject carried over from the earlier turns without a model;
    ``chat_model``: a standalone question from the configured chat model), the carried
    ``subject`` and a sentence of ``reason``."""

    question: str
    retrieved_on: str
    method: ResolutionMethod
    reason: str
    subject: NotRequired[str]
