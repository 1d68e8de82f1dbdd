"""Input, output and internal state schemas of the graph, with their reducers.

Branch results land in a list with an additive reducer and carry their own (view, retriever)
key, because parallel writes arrive in no fixed order.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.prompt_values import PromptValue
from parallel_rag.nodes.records import (
    BranchRecord,
    BranchResult,
    Citation,
    FusedDocument,
    QueryView,
)
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
)
from typing_extensions import TypedDict  # pydantic needs it for schemas on Python 3.11

MAX_QUERY_CHARS = 4000
MAX_TOP_K = 100
FilterValue = StrictStr | StrictBool | StrictInt | StrictFloat


class RAGRequest(BaseModel):
    """What a caller may send. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="the question", max_length=MAX_QUERY_CHARS)
    top_k: StrictInt = Field(default=5, ge=1, le=MAX_TOP_K, description="fused documents to use")
    filters: dict[str, FilterValue] | None = Field(
        default=None, description="metadata equality filter every branch applies"
    )
    tenant: str | None = Field(default=None, min_length=1, max_length=128)

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty or whitespace")
        return value


class RetrievalResult(TypedDict):
    """What the retrieval graph returns: the fused documents and their account, no answer."""

    documents: list[FusedDocument]
    queries: list[dict[str, str]]
    branches: list[BranchRecord]
    warnings: list[str]
    timings: dict[str, float]


class RAGResult(TypedDict):
    """What the answer graph returns."""

    answer: str
    documents: list[FusedDocument]
    queries: list[dict[str, str]]
    citations: list[Citation]
    branches: list[BranchRecord]
    warnings: list[str]
    timings: dict[str, float]


def merge_timings(left: dict[str, float] | None, right: dict[str, float] | None) -> dict:
    """Per-node milliseconds; fan-out nodes report their slowest task (they run in parallel)."""
    merged = dict(left or {})
    for node, ms in (right or {}).items():
        merged[node] = round(max(merged.get(node, 0.0), ms), 3)
    return merged


class RAGState(TypedDict, total=False):
    """Internal state: the request, the views, every branch result, and the result fields.
    The run's knobs are not state: nodes read them from ``runtime.context``."""

    query: str
    top_k: int
    filters: dict[str, Any] | None
    tenant: str | None
    views: list[QueryView]
    branch_results: Annotated[list[BranchResult], operator.add]
    documents: list[FusedDocument]
    queries: list[dict[str, str]]
    citations: list[Citation]
    branches: list[BranchRecord]
    answer: str
    warnings: Annotated[list[str], operator.add]
    timings: Annotated[dict[str, float], merge_timings]


def coerce_request(value: Any) -> dict[str, Any]:
    """Validate graph input: a dict, a ``RAGRequest``, a bare question, or a prompt value."""
    if isinstance(value, RAGRequest):
        return value.model_dump()
    if isinstance(value, str):
        value = {"query": value}
    elif isinstance(value, PromptValue):
        value = {"query": value.to_string()}
    return RAGRequest.model_validate(value).model_dump()
