"""Validation errors turned into ``(path, message)`` pairs in one place, for every surface.

Pydantic reports a problem as a location tuple and a message written for a developer: the
location carries the labels pydantic gives union members (a discriminator's tag such as
``bm25``, ``str``, ``list[ContentPart]``, ``function-after[...]``) and the message a
``Value error, `` prefix. ``problems`` turns any ``ValidationError`` (or the error dicts FastAPI
and LangServe hand over) into pairs whose path is the one written in the input
(``retrievers.0.top_k``, ``configurable.fusion_k``) and whose message is one bounded line with
every registered secret redacted. A surface only lays the pairs out: the CLI's
``parallel-rag: path: message`` lines, the OpenAI-style error body (``openai_error``, the one
builder the router, LangServe and the admission gate answer with), LangServe's 422, the MCP
tool error.

The project's own field errors take part: a validator raises ``FieldError`` to put a problem
on a field (or several, with the paths of a nested validation) and ``problems`` expands it
under the validator's location; ``KnobError`` is one; a ``ConfigError`` built by
``ConfigError.invalid`` keeps the pairs it was written from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from parallel_rag.backends.shared.secrets import MAX_ERROR_CHARS, redact
from pydantic import ValidationError

Problem = tuple[str, str]
"""A dotted path in the input (``""`` for the input as a whole) and what is wrong there."""

_PREFIXES = ("Value error, ", "Assertion failed, ")
_SHOULD_BE = "Input should be "
_SCALAR_LABELS = frozenset(
    "str int float bool bytes none decimal date time datetime timedelta uuid url any".split()
)
_BRACKETED_LABEL = re.compile(r"^[\w-]*\[.*\]$", re.DOTALL)  # list[X], function-after[...]
_LARGE_INPUT_CHARS = 1000


class FieldError(ValueError):
    """A problem on a named field, raised by the project's own checks (and by validators, to
    place a problem on a field of the model they check). ``field`` and ``message`` are the
    first problem; ``problems`` all of them."""

    def __init__(self, field: str, message: str, *more: Problem):
        self.field, self.message = field, message
        self.problems: tuple[Problem, ...] = ((field, message), *more)
        super().__init__("; ".join(problem_lines(self.problems)))

    @classmethod
    def of(cls, problems: Sequence[Problem]) -> Self:
        """One error carrying several problems (a nested validation's, paths included)."""
        first, *more = problems or [("", "invalid")]
        return cls(*first, *more)


class ConfigError(ValueError):
    """A configuration problem found at load time; the message names the bad field or file.
    ``problems`` holds the pairs when it was written from a validation (``invalid``)."""

    def __init__(self, message: str, problems: Sequence[Problem] = ()):
        super().__init__(message)
        self.problems: tuple[Problem, ...] = tuple(problems)

    @classmethod
    def invalid(cls, what: str, source: str, problems: Sequence[Problem]) -> Self:
        """``invalid <what> in <source>:`` then one indented ``path: message`` line each."""
        lines = "".join(f"\n  {line}" for line in problem_lines(problems))
        return cls(f"invalid {what} in {source}:{lines}", problems)


def problems(
    error: ValidationError | Iterable[Mapping[str, Any]],
    data: Any = None,
    *,
    prefix: str = "",
) -> list[Problem]:
    """Every problem of ``error`` as a ``(path, message)`` pair, in pydantic's order; problems
    at one path (a union's members each failing) become one pair.

    ``data`` is the validated input: with it, a location part the input does not have is known
    to be a label pydantic inserted (a discriminator's tag, a member model's name) and is left
    out; without it, only labels pydantic spells as type names are. ``prefix`` starts every
    path (``configurable`` for the knobs of a RunnableConfig)."""
    details = error.errors() if isinstance(error, ValidationError) else error
    merged: dict[str, list[str]] = {}
    for detail in details:
        if not isinstance(detail, Mapping):
            detail = {"msg": str(detail)}
        path = _join(prefix, _path(detail.get("loc", ()), data, detail.get("type")))
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            found = [(_join(path, field), message) for field, message in cause.problems]
        else:
            found = [(path, str(detail.get("msg", "invalid")))]
        for where, message in found:
            messages = merged.setdefault(redact(where), [])
            message = _clean_message(message)
            if message not in messages:
                messages.append(message)
    return [(path, _merge(messages)) for path, messages in merged.items()]


def problem_lines(pairs: Iterable[Problem]) -> list[str]:
    """``path: message`` (just ``message`` for the input as a whole), one per problem."""
    return [f"{path}: {message}" if path else message for path, message in pairs]


def one_line(pairs: Iterable[Problem]) -> str:
    """All problems on one line, ``; `` between them (an error body's or a tool's message)."""
    return "; ".join(problem_lines(pairs))


def openai_error(
    message: str, kind: str = "invalid_request_error", code: str | None = None, param=None
) -> dict[str, Any]:
    """The OpenAI-style error body every HTTP surface answers with,
    ``{"error": {"message", "type", "param", "code"}}``; the message is redacted."""
    return {"error": {"message": redact(message), "type": kind, "param": param, "code": code}}


def public_details(details: Iterable[Any]) -> list[dict[str, Any]]:
    """Pydantic's error dicts as a client may see them (FastAPI's ``detail``): without the
    exception objects and documentation links, a large offending input left out (a 1 MB query
    gets a short answer), secrets redacted."""
    public = []
    for detail in details:
        if not isinstance(detail, Mapping):
            public.append({"msg": _clean_message(str(detail))})
            continue
        kept = {k: v for k, v in detail.items() if k not in ("ctx", "url")}
        if "input" in kept and _large(kept["input"]):
            del kept["input"]
        public.append({k: _redacted(v) for k, v in kept.items()})
    return public


# -- paths ---------------------------------------------------------------------------------


def _path(loc: Sequence[Any], data: Any, kind: str | None) -> str:
    """The dotted path of ``loc`` with pydantic's labels left out (see ``problems``)."""
    parts: list[str] = []
    holder = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if _is_label(part, holder, last=last, kind=kind):
            continue  # a label names a union member: the input is the same one level down
        parts.append(str(part))
        holder = _child(holder, part)
    return ".".join(parts)


def _is_label(part: Any, holder: Any, *, last: bool, kind: str | None) -> bool:
    if not isinstance(part, str):
        return False  # an index
    if isinstance(holder, Mapping):
        if part in holder or (last and kind == "missing"):
            return False
        tags = {value for value in holder.values() if isinstance(value, str)}
        if part in tags or (part[:1].isupper() and part.isidentifier()):
            return True  # a discriminator's tag (the entry's own value), a member model's name
    elif isinstance(holder, Sequence) and not isinstance(holder, str | bytes):
        return True  # a list is indexed by numbers: a name here is a member's label
    return part in _SCALAR_LABELS or bool(_BRACKETED_LABEL.match(part))


def _child(holder: Any, part: Any) -> Any:
    if isinstance(holder, Mapping):
        return holder.get(part)
    if isinstance(holder, Sequence) and not isinstance(holder, str | bytes):
        if isinstance(part, int) and -len(holder) <= part < len(holder):
            return holder[part]
    return None


def _join(prefix: str, path: str) -> str:
    return ".".join(p for p in (prefix, path) if p)


# -- messages ------------------------------------------------------------------------------


def _clean_message(message: str) -> str:
    """One line, pydantic's prefixes gone, secrets redacted, at most ``MAX_ERROR_CHARS``."""
    for prefix in _PREFIXES:
        message = message.removeprefix(prefix)
    message = " ".join(redact(message).split())
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "…"
    return message


def _merge(messages: list[str]) -> str:
    """One message for the problems at one path: a union's "Input should be a valid string",
    "... a valid integer" read "Input should be a valid string or a valid integer"."""
    if len(messages) > 1 and all(m.startswith(_SHOULD_BE) for m in messages):
        return _SHOULD_BE + " or ".join(m.removeprefix(_SHOULD_BE) for m in messages)
    return "; ".join(messages)


def _large(value: Any) -> bool:
    return len(value if isinstance(value, str) else repr(value)) > _LARGE_INPUT_CHARS


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redacted(v) for v in value)
    return value
