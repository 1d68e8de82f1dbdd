"""The router's errors (``graph/errors.py`` turns each into ``(path, message)`` pairs):
configuration problems as ``path.to.field: problem`` lines (``RouteError``), and failures
answered to a caller as an OpenAI-style error body (``RouterError``: a malformed request, an
unknown model, ``on_failure: block``, the upstream down or slow)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parallel_rag.graph.configuration import ConfigError
from parallel_rag.graph.errors import FieldError, one_line, openai_error, problems
from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:  # the "servers" extra; a router file is read (route, ingest) without it
    from fastapi.responses import JSONResponse


class RouteError(ConfigError):
    """A router configuration problem; the message names the field."""


def nested_problems(
    error: ValidationError, prefix: str, data: Any, *, drop: str | None = None
) -> FieldError:
    """The ``FieldError`` a validator raises to carry a nested validation's problems, their
    paths under ``prefix`` (``drop`` removes an internal path segment such as
    ``retrievers.0.``)."""
    found = problems(error, data, prefix=prefix)
    if drop:
        found = [(path.replace(drop, "", 1), message) for path, message in found]
    return FieldError.of(found)


def route_error(error: ValidationError, source: str, data: Any) -> RouteError:
    """The ``RouteError`` for a router configuration that failed validation."""
    return RouteError.invalid("router configuration", source, problems(error, data))


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
        from fastapi.responses import JSONResponse

        return JSONResponse(status_code=self.status, content=self.body(), headers=self.headers)


def validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``data`` as ``model``, or a 400 naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        pairs = problems(error, data)
        param = pairs[0][0] or None
        raise RouterError(400, one_line(pairs), code="invalid_value", param=param) from None
