"""A run's request as the graph takes it from what LangGraph delivered, with LangGraph's public
API only.

LangGraph writes a graph's input into the state itself, before any hook of ours runs: START
keeps the keys the input schema (``RAGRequest``) names and drops the others, applies no
validation, and refuses what is not a mapping (a bare string). So:

- a conversation given as dicts is checked, whole and as the caller wrote it, by the
  ``messages`` channel's reducer (``add_conversation`` in ``graph/state.py``), where LangGraph
  first handles it;
- the entry router (a conditional edge from START, before any node) checks the rest with the
  same ``RAGRequest`` rules (``accept_request``: a ``ValidationError`` naming the field) and
  brings the request to one shape: a ``query`` becomes the conversation's last user message,
  a conversation gives the ``query``, ``top_k`` gets its default;
- the first task the router starts writes that shape into the state (``REQUEST``, a key of
  its ``Send`` payload, merged into the task's update by ``GraphStep``), so no step is spent
  on it: every later node reads the request from the state as before;
- on a thread (a checkpointer and a ``thread_id``) the state also holds the thread's earlier
  turns, so only the new question is checked, and the run's last node clears the request
  fields (``CLEARED``): the next run's router sees only what that run was given.

An unknown key is dropped by LangGraph before any of this (the surfaces that take raw requests,
LangServe, MCP and the CLI, refuse it against ``RAGRequest`` themselves).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from parallel_rag.graph.state import RAGRequest

REQUEST = "request"
"""The ``Send`` payload key carrying the request's state update to the run's first task."""

REQUEST_FIELDS = ("query", "top_k", "filters", "tenant")
CLEARED: dict[str, Any] = dict.fromkeys(REQUEST_FIELDS)
"""What the last node of a run on a thread writes: the request fields, unset."""


def threaded(config: RunnableConfig | None) -> bool:
    """Whether the run continues a thread (its state holds the thread's earlier turns)."""
    return bool(((config or {}).get("configurable") or {}).get("thread_id"))


def _question(query: str) -> HumanMessage:
    # an id from the start: LangGraph's messages stream mode shows a node's new messages, and a
    # message a task was given (its Send payload's ``messages``) is not new to it
    return HumanMessage(query, id=str(uuid4()))


def accept_request(
    state: Mapping[str, Any], config: RunnableConfig | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's request from ``state`` (what LangGraph wrote of the input, over the thread's
    state): ``(view, update)``, the state as the run's nodes must see it, and what to write
    for that. Raises the ``ValidationError`` ``RAGRequest`` would, naming the field."""
    fields = {k: state[k] for k in REQUEST_FIELDS if state.get(k) is not None}
    messages: list[BaseMessage] = list(state.get("messages") or ())
    if threaded(config) and messages:
        # the thread's earlier turns are history: check what this run asks
        if "query" in fields:
            request = RAGRequest.model_validate(fields)
            last = messages[-1]
            asked = isinstance(last, HumanMessage) and last.text == request.query
            new = [] if asked else [_question(request.query)]
        else:
            request = RAGRequest.model_validate({**fields, "messages": messages[-1:]})
            new = []
    else:
        request = RAGRequest.model_validate(
            {**fields, **({"messages": messages} if messages else {})}
        )
        new = [] if messages else [_question(request.query)]
    question = request.query if new or request.messages is None else request.messages[-1].text
    update: dict[str, Any] = {
        "query": question,
        "top_k": request.top_k,
        "filters": request.filters,
        "tenant": request.tenant,
    }
    view = {**state, **update, "messages": [*messages, *new]}
    if new:
        update["messages"] = new
    return view, update
