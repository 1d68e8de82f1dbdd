"""The failure policy every node applies, and the errors the workflow raises on purpose.

Each component that can fail (rewriter, retriever, fallback, reranker, generator) has an
``on_failure`` setting; ``apply_failure_policy`` is the one place it is applied: ``block`` stops
the request with a ``BlockedError`` (HTTP 503 on servers), ``warn`` gives the caller the warning
text the result carries, ``skip`` gives nothing. The failure is logged under every policy. The
node decides what the request gets instead (the original query, retrieval order, no answer).
``attempt`` runs a component's call under its policy, letting LangGraph's own control flow
(interrupts) through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from langgraph.errors import GraphBubbleUp
from parallel_rag.backends.shared.secrets import describe_error

FailurePolicy = Literal["skip", "warn", "block"]
T = TypeVar("T")

logger = logging.getLogger(__name__)


class RAGError(Exception):
    """Base class of errors parallel-rag raises deliberately."""


class BlockedError(RAGError):
    """A component with ``on_failure: block`` failed; the request stops (HTTP 503 on servers)."""

    def __init__(self, component: str, reason: str):
        self.component = component
        self.reason = reason
        super().__init__(f"{component} failed and its on_failure policy is 'block': {reason}")


def apply_failure_policy(
    policy: FailurePolicy,
    component: str,
    failure: BaseException | str,
    *,
    warning: str,
    cause: BaseException | None = None,
) -> str | None:
    """Apply ``policy`` to a failure of ``component``.

    ``failure`` is the exception (described by ``describe_error``: one bounded, redacted line)
    or a ready failure text, ``cause`` the exception behind such a text. ``block`` raises
    ``BlockedError(component, reason)``; ``warn`` returns the result's warning,
    ``"{warning}: {reason}"`` (``warning`` says what the request gets instead); ``skip`` returns
    None. The failure is logged under every policy."""
    if isinstance(failure, BaseException):
        reason, cause = describe_error(failure), cause or failure
    else:
        reason = failure
    logger.warning("%s failed (on_failure=%s): %s", component, policy, reason)
    if policy == "block":
        raise BlockedError(component, reason) from cause
    return f"{warning}: {reason}" if policy == "warn" else None


@dataclass
class Attempt(Generic[T]):
    """A component call's outcome: its ``value``, or ``failed`` with the result's ``warnings``
    (one under ``warn``, none under ``skip``)."""

    value: T | None = None
    failed: bool = False
    warnings: list[str] = field(default_factory=list)


def attempt(
    call: Callable[[], T], policy: FailurePolicy, component: str, *, warning: str
) -> Attempt[T]:
    """Run ``call()``; its failure goes through ``apply_failure_policy``. LangGraph's control
    flow (``GraphBubbleUp``: interrupts) is not a failure and propagates."""
    try:
        return Attempt(call())
    except GraphBubbleUp:
        raise
    except Exception as error:
        text = apply_failure_policy(policy, component, error, warning=warning)
        return Attempt(failed=True, warnings=[text] if text else [])
