"""Keeping credentials out of results, branch records, errors and logs.

Backends register every secret they hold (API keys, auth header values); ``redact`` replaces
them in any text before it leaves the backend, ``describe_error`` turns any failure into the
bounded, redacted one-line text that results and logs carry, and a logging filter does the same
for the HTTP libraries' loggers, in case a key was put in a URL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from pydantic import SecretStr

REDACTED = "***"
MAX_ERROR_CHARS = 500
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words; keys are never this short
# logger filters apply to records created on that exact logger, so name each one
_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy")

_lock = threading.Lock()
_secrets: set[str] = set()


def secret_value(secret: SecretStr | str | None) -> str | None:
    """The plain value of a secret (or None)."""
    if secret is None:
        return None
    return secret.get_secret_value() if isinstance(secret, SecretStr) else secret


def register_secrets(values: Iterable[SecretStr | str | None]) -> list[str]:
    """Remember secrets so every later log record is redacted; returns the plain values."""
    plain = [v for v in (secret_value(s) for s in values) if v and len(v) >= MIN_SECRET_CHARS]
    with _lock:
        _secrets.update(plain)
    _install_log_filter()
    return plain


def secrets_in(value: object) -> list[SecretStr | str]:
    """Every secret a configuration holds: its ``SecretStr`` fields (API keys, tokens) and the
    values of its ``headers`` mappings (auth headers), walked through nested models."""
    from pydantic import BaseModel

    found: list[SecretStr | str] = []
    if isinstance(value, SecretStr):
        found.append(value)
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            field = getattr(value, name, None)
            if name == "headers" and isinstance(field, dict):
                found.extend(v for v in field.values() if isinstance(v, str))
            else:
                found.extend(secrets_in(field))
    elif isinstance(value, list | tuple):
        for item in value:
            found.extend(secrets_in(item))
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(secrets_in(item))
    return found


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every known secret (and the given ones) replaced by ``***``."""
    with _lock:
        known = set(_secrets)
    known.update(s for s in secrets or () if s and len(s) >= MIN_SECRET_CHARS)
    for secret in sorted(known, key=len, reverse=True):  # longest first: keys may nest
        text = text.replace(secret, REDACTED)
    return text


def describe_error(error: BaseException) -> str:
    """A bounded, single-line description of a failure, every known secret redacted (a hostile
    or careless service may echo the key it was sent; this text reaches results and logs)."""
    text = redact(str(error)).strip().replace("\n", " ")
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text[:MAX_ERROR_CHARS]


class RedactingFilter(logging.Filter):
    """Rewrites a log record's message with every registered secret redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_filter = RedactingFilter()
_installed = False


def _install_log_filter() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(_filter)
        _installed = True
