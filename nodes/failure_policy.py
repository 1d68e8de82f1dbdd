"""Errors the workflow raises on purpose, so surfaces can map them to clear responses."""


class RAGError(Exception):
    """Base class of errors parallel-rag raises deliberately."""


class BlockedError(RAGError):
    """A component with ``on_failure: block`` failed; the request stops (HTTP 503 on servers)."""

    def __init__(self, component: str, reason: str):
        self.component = component
        self.reason = reason
        super().__init__(f"{component} failed and its on_failure policy is 'block': {reason}")
