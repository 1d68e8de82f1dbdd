"""Input, output and internal state schemas of the graph, with their reducers.

Branch results land in a list with an additive reducer and carry their own (view, retriever)
key, because parallel writes arrive in no fixed order.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.prompt_values import PromptValue
from langgraph.graph.message import add_messages
from parallel_rag.graph.errors import FieldError
from parallel_rag.nodes.contextualize.history import ConversationError, coerce_messages
from parallel_rag.nodes.records import (
    BranchRecord,
    BranchResult,
    Citation,
    FusedDocument,
    QueryView,
    ResolutionRecord,
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
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs it for schemas on Python 3.11

MAX_QUERY_CHARS = 4000
MAX_TOP_K = 100
FilterValue = StrictStr | StrictBool | StrictInt | StrictFloat


def add_conversation(left: Any, right: Any) -> Any:
    """The ``messages`` channel's reducer: ``add_messages``, after a conversation written as the
    caller wrote it (dicts, a string: graph input, which LangGraph hands the channel before any
    node runs) is checked as ``RAGRequest`` checks it, a ``ValidationError`` naming the field
    (``messages.3.role``), and so is an empty conversation (no node writes one); LangChain
    messages (a node's answer, input of message objects) go straight on."""
    if right is None:
        return left
    if (
        not isinstance(right, list)
        or not right
        or not all(isinstance(m, BaseMessage) for m in right)
    ):
        right = RAGRequest.model_validate({"messages": right}).messages
    return add_messages(left, right)


Messages = Annotated[list[AnyMessage], add_conversation]


class _MissingQuestion(str):
    """Stands for an absent question while the request validates (a str: error bodies echo it)."""


_MISSING_QUESTION = _MissingQuestion("")


class RAGRequest(BaseModel):
    """What a caller may send: a ``query``, or a conversation (``messages``, its last turn the
    user's question). Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    query: str | None = Field(default=None, description="the question", max_length=MAX_QUERY_CHARS)
    messages: Messages | None = Field(
        default=None,
        description="the conversation: LangChain messages or {role, content} dicts, the "
        "user's question last (instead of query)",
    )
    top_k: StrictInt = Field(default=5, ge=1, le=MAX_TOP_K, description="fused documents to use")
    filters: dict[str, FilterValue] | None = Field(
        default=None, description="metadata equality filter every branch applies"
    )
    tenant: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="before")
    @classmethod
    def _mark_missing_question(cls, data: Any) -> Any:
        # neither a query nor a conversation: reported on ``query`` as pydantic reports a
        # missing field (loc ``query``, type ``missing``), which every surface names
        if isinstance(data, dict) and data.get("query") is None and data.get("messages") is None:
            return {**data, "query": _MISSING_QUESTION}
        return data

    @field_validator("query", mode="before")
    @classmethod
    def _question_present(cls, value: Any) -> Any:
        if isinstance(value, _MissingQuestion):
            raise PydanticCustomError("missing", "Field required (or a conversation in messages)")
        return value

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty or whitespace")
        return value

    @field_validator("messages", mode="before")
    @classmethod
    def _conversation(cls, value: Any) -> Any:
        if value is None:
            return value
        try:
            return coerce_messages(value, max_question_chars=MAX_QUERY_CHARS)
        except ConversationError as error:  # "messages.3.role", as the caller wrote it
            field = error.field.removeprefix("messages").lstrip(".")
            raise FieldError(field, str(error).split(": ", 1)[1]) from None

    @model_validator(mode="after")
    def _question_given(self) -> RAGRequest:
        if self.query is None and self.messages is None:
            raise FieldError("query", "Field required (or a conversation in messages)")
        if self.query is not None and self.messages is not None:
            last = self.messages[-1]
            text = last.text if isinstance(last, BaseMessage) else last.get("content")
            if self.query != text:  # the same question twice is fine
                raise FieldError("query", "the question goes here or last in messages, not both")
        return self


class RetrievalResult(TypedDict):
    """What the retrieval graph returns: the fused documents and their account, no answer."""

    resolution: ResolutionRecord
    documents: list[FusedDocument]
    fusion: dict[str, Any]  # the settings that fused them and where they came from
    queries: list[dict[str, str]]
    branches: list[BranchRecord]
    warnings: list[str]
    timings: dict[str, float]


class RAGResult(TypedDict):
    """What the answer graph returns; ``messages`` is the conversation with its answer."""

    messages: Messages
    answer: str
    resolution: ResolutionRecord
    documents: list[FusedDocument]
    fusion: dict[str, Any]  # the settings that fused them and where they came from
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

    messages: Messages
    query: str  # the question retrieved on (written out when the conversation resolved it)
    follow_up: str | None  # the question as written, when resolution changed it
    resolution: ResolutionRecord
    top_k: int
    filters: dict[str, Any] | None
    tenant: str | None
    views: list[QueryView]
    branch_results: Annotated[list[BranchResult], operator.add]
    documents: list[FusedDocument]
    fusion: dict[str, Any]
    queries: list[dict[str, str]]
    citations: list[Citation]
    branches: list[BranchRecord]
    answer: str
    warnings: Annotated[list[str], operator.add]
    timings: Annotated[dict[str, float], merge_timings]


def coerce_request(value: Any) -> dict[str, Any]:
    """Validate graph input: a dict, a ``RAGRequest``, a bare question, or a prompt value. The
    result carries both: ``query`` (the question as written) and ``messages`` (the
    conversation; a plain query becomes a one-message conversation, so a thread reads as one)."""
    if isinstance(value, str):
        value = {"query": value}
    elif isinstance(value, PromptValue):
        value = {"query": value.to_string()}
    if isinstance(value, RAGRequest) and type(value) is not RAGRequest:
        value = value.model_dump(exclude_unset=True)  # a served form of it: plain turns
    request = value if isinstance(value, RAGRequest) else RAGRequest.model_validate(value)
    fields = request.model_dump(exclude={"messages"})
    if request.messages is None:
        fields["messages"] = [HumanMessage(request.query)]
    else:
        fields["messages"] = request.messages
        fields["query"] = request.messages[-1].text
    return fields
