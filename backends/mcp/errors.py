"""The errors an ``mcp`` branch raises, so its ``on_failure`` applies: a tool error, a
timeout, an answer larger than ``max_response_bytes``."""

from __future__ import annotations

from parallel_rag.backends.shared.json_http import BackendResponseError


class MCPToolError(RuntimeError):
    """The tool answered with ``isError``, or the call failed at the protocol level."""


class MCPTimeoutError(MCPToolError):
    """The tool did not answer within the backend's ``timeout_seconds`` (named in the message:
    the branch's own, longer timeout did not expire)."""


class ResponseTooLargeError(BackendResponseError):
    """A tool's answer is larger than ``max_response_bytes``; read from the transport, nothing
    beyond the cap (plus the envelope allowance) was read."""
