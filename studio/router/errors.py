"""The router's errors, formatted in one place: configuration problems as ``path.to.field:
problem`` lines (``RouteError``), and failures answered to a caller as an OpenAI-style error
body (``RouterError``: a malformed request, an unknown model, ``on_failure: block``, the
upstream down or slow)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse
from parallel_rag.backends.registry import BACKENDS, REFUSED
from parallel_rag.graph.configuration import ConfigError
from parallel_rag.graph.errors import one_line, openai_error, problems
from pydantic import BaseModel, ValidationError

NESTED_MARK = "@"
"""Starts a validator's message that already carries the paths of the problems it lists."""
_BACKEND_TAGS = {*BACKENDS, *REFUSED}  # the tags pydantic puts in error paths
_LEGS = {"primary", "fallback", "backend_config"}


class RouteError(ConfigError):
    """A router configuration problem; the message names the field."""


def format_errors(error: ValidationError, prefix: str = "") -> list[str]:
    """``path.to.field: problem`` lines; pydantic's discriminator tags (backend names) and
    union-member names are left out of the path."""
    lines = []
    for problem in error.errors():
        parts: list[str] = [prefix] if prefix else []
        previous: Any = None
        for part in problem["loc"]:
            tag = isinstance(part, str) and (
                (part in _BACKEND_TAGS and (isinstance(previous, int) or previous in _LEGS))
                or part.startswith(("function-", "tagged-union"))
            )
            if not tag:
                parts.append(str(part))
            previous = part
        message = problem["msg"].removeprefix("Value error, ")
        path = ".".join(p for p in parts if p)
        if message.startswith(NESTED_MARK):  # problems found one level down, paths included
            for nested in message[1:].split("; " + NESTED_MARK):
                lines.append(f"{path}.{nested}" if path else nested)
            continue
        lines.append(f"{path}: {message}" if path else message)
    return lines


def nested_problems(error: ValidationError, prefix: str, *, drop: str | None = None) -> ValueError:
    """A validator's ``ValueError`` carrying a nested validation's problems with their paths
    (``drop`` removes an internal path segment such as ``retrievers.0.``)."""
    lines = format_errors(error, prefix)
    if drop:
        lines = [line.replace(drop, "", 1) for line in lines]
    return ValueError(NESTED_MARK + ("; " + NESTED_MARK).join(lines))


def route_error(error: ValidationError, source: str) -> RouteError:
    """The ``RouteError`` for a router configuration that failed validation."""
    lines = "\n".join(f"  {line}" for line in format_errors(error))
    return RouteError(f"invalid router configuration in {source}:\n{lines}")


class RouterError(Exception):
    """A failure answered as an OpenAI-style error ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.code, self.param, self.headers = code, param, dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body (secrets redacted)."""
        return openai_error(self.message, self.kind, self.code, self.param)

    def response(self) -> JSONResponse:
        return JSONResponse(status_code=self.status, content=self.body(), headers=self.headers)


def validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``data`` as ``model``, or a 400 naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        pairs = problems(error, data)
        param = pairs[0][0] or None
        raise RouterError(400, one_line(pairs), code="invalid_value", param=param) from None
