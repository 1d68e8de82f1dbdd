"""JSON over HTTP for the network backends (external APIs, OpenAI file search), with httpx.

Every call has a connect timeout, a per-read timeout and an overall deadline, and reads the body
as a stream that stops at ``max_response_bytes`` (omitted or 0 means 4 MiB): a body of exactly
the cap is accepted, one byte more is an error, and nothing past the cap is ever buffered.
Failures raise ``BackendRequestError`` with a bounded, single-line message (HTTP status and an
excerpt of the body, or what was malformed) from which every secret has been redacted.

Transient failures (connection refused or reset, a connection dropped mid-response, HTTP
502/503/504) are retried up to ``max_retries`` times with exponential backoff and jitter,
honouring a short ``Retry-After``; every attempt shares the one overall deadline. Timeouts,
other statuses (4xx, 500) and malformed answers are not retried: repeating them cannot help.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from parallel_rag.backends.shared.secrets import redact, register_secrets
from pydantic import SecretStr

DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
ERROR_EXCERPT_BYTES = 512
ERROR_EXCERPT_CHARS = 200
USER_AGENT = "parallel-rag"
DEFAULT_MAX_RETRIES = 2
DEFAULT_BACKOFF_SECONDS = 0.2
MAX_RETRY_AFTER_SECONDS = 5.0
RETRY_STATUSES = frozenset({502, 503, 504})
# the request never got a complete answer: safe to repeat a (read-only) search
TRANSIENT_ERRORS = (
    httpx.ConnectError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
logger = logging.getLogger(__name__)


class BackendRequestError(RuntimeError):
    """A network backend call failed; the message is bounded and carries no secret."""


class BackendResponseError(BackendRequestError):
    """The service answered, but not with what its documented format promises."""


class TransientStatusError(BackendRequestError):
    """HTTP 502/503/504: the service (or a proxy before it) may answer the next attempt."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header given in seconds (HTTP dates are ignored)."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def effective_max_bytes(max_response_bytes: int | None) -> int:
    """The response cap: the setting, or 4 MiB when it is omitted or 0."""
    return max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES


def display_url(url: str) -> str:
    """The URL as shown in errors: no credentials, no query string."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _excerpt(raw: bytes) -> str:
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    if len(text) > ERROR_EXCERPT_CHARS:
        text = text[:ERROR_EXCERPT_CHARS] + "..."
    return text or "(empty body)"


def require(mapping: Any, key: str, where: str, kind: type | tuple[type, ...] | None = None) -> Any:
    """``mapping[key]``, or a ``BackendResponseError`` saying which field is missing or wrong."""
    if not isinstance(mapping, Mapping):
        raise BackendResponseError(f"{where}: expected a JSON object, got {type(mapping).__name__}")
    if key not in mapping:
        raise BackendResponseError(f"{where}: missing field '{key}'")
    value = mapping[key]
    if kind is not None and not isinstance(value, kind):
        expected = getattr(kind, "__name__", None) or str(kind).replace(" | ", "/")
        raise BackendResponseError(
            f"{where}: field '{key}' should be {expected}, got {type(value).__name__}"
        )
    return value


class JSONHTTPClient:
    """POSTs JSON and returns the decoded JSON answer; one pooled httpx client per backend."""

    def __init__(
        self,
        *,
        service: str,
        timeout_seconds: float,
        connect_timeout_seconds: float | None = None,
        max_response_bytes: int | None = None,
        secrets: Sequence[SecretStr | str | None] = (),
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
    ):
        self.service = service
        self.max_retries = max(0, max_retries)
        self.backoff_seconds = backoff_seconds
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds or min(timeout_seconds, 10.0)
        self.max_bytes = effective_max_bytes(max_response_bytes)
        self._secrets = register_secrets(secrets)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=httpx.Timeout(
                        self.timeout_seconds, connect=self.connect_timeout_seconds
                    ),
                    follow_redirects=False,
                    trust_env=False,
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _fail(self, url: str, detail: str, kind: type[BackendRequestError] = BackendRequestError):
        return kind(redact(f"{self.service} request to {display_url(url)} {detail}", self._secrets))

    def post(self, url: str, payload: Any, headers: Mapping[str, str]) -> Any:
        """POST ``payload`` as JSON; the decoded JSON body of a 2xx answer. Transient failures
        are retried (see the module docstring) within one overall deadline."""
        deadline = time.monotonic() + self.timeout_seconds
        attempts = self.max_retries + 1
        body = b""
        for attempt in range(1, attempts + 1):
            problem: BackendRequestError | None = None
            transient = False
            try:
                body = self._post(url, payload, headers, deadline)
            except TransientStatusError as error:
                problem, transient = error, True
            except BackendRequestError as error:
                problem = error
            except httpx.TimeoutException as error:
                problem = self._fail(url, f"timed out ({type(error).__name__})")
            except TRANSIENT_ERRORS as error:
                problem = self._fail(url, f"failed: {type(error).__name__}: {error}")
                transient = True
            except httpx.HTTPError as error:
                problem = self._fail(url, f"failed: {type(error).__name__}: {error}")
            if problem is None:
                break
            delay = self._backoff(attempt, problem)
            if not transient or attempt == attempts or time.monotonic() + delay >= deadline:
                if attempt > 1:
                    problem = BackendRequestError(f"{problem} (after {attempt} attempts)")
                raise problem  # raised outside the handler: no chained exception keeps a secret
            logger.warning(
                "%s (attempt %d of %d); retrying in %.2fs", problem, attempt, attempts, delay
            )
            time.sleep(delay)
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            detail = f"returned malformed JSON ({error}); body starts: {_excerpt(body[:120])}"
        raise self._fail(url, detail, BackendResponseError)

    def _backoff(self, attempt: int, problem: BackendRequestError) -> float:
        """Exponential backoff with jitter; a short ``Retry-After`` is honoured."""
        delay = self.backoff_seconds * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
        retry_after = getattr(problem, "retry_after", None)
        if retry_after is not None and retry_after <= MAX_RETRY_AFTER_SECONDS:
            delay = max(delay, retry_after)
        return delay

    def _post(self, url: str, payload: Any, headers: Mapping[str, str], deadline: float) -> bytes:
        remaining = max(deadline - time.monotonic(), 0.001)
        timeout = httpx.Timeout(remaining, connect=min(self.connect_timeout_seconds, remaining))
        all_headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
            **headers,
        }
        content = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        with self._http().stream(
            "POST", url, content=content, headers=all_headers, timeout=timeout
        ) as response:
            if not 200 <= response.status_code < 300:
                excerpt = self._read(response, url, ERROR_EXCERPT_BYTES, deadline, truncate=True)
                detail = (
                    f"failed: HTTP {response.status_code} {response.reason_phrase}: "
                    f"{_excerpt(excerpt)}"
                )
                if response.status_code in RETRY_STATUSES:
                    error = self._fail(url, detail, TransientStatusError)
                    error.retry_after = retry_after_seconds(response.headers.get("retry-after"))
                    raise error
                raise self._fail(url, detail)
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.max_bytes:
                raise self._fail(
                    url,
                    f"failed: response of {declared} bytes exceeds max_response_bytes "
                    f"({self.max_bytes})",
                )
            return self._read(response, url, self.max_bytes, deadline, truncate=False)

    def _read(
        self, response: httpx.Response, url: str, limit: int, deadline: float, *, truncate: bool
    ) -> bytes:
        """Stream the body; stop at ``limit`` bytes (an error unless ``truncate``)."""
        received = bytearray()
        for chunk in response.iter_bytes():
            if time.monotonic() > deadline:
                raise self._fail(url, f"timed out after {self.timeout_seconds:g}s reading the body")
            if len(received) + len(chunk) > limit:
                if truncate:
                    received.extend(chunk[: limit - len(received)])
                    break
                raise self._fail(
                    url, f"failed: response exceeds max_response_bytes ({limit} bytes)"
                )
            received.extend(chunk)
        return bytes(received)
