"""The ``backend_config`` of an ``openai`` (vector-store file search) retriever and the check of
its attribute filter: pydantic and the standard library only, so the configuration schema holds
it without importing the HTTP client (``retriever.py`` does, when a configuration builds an
``openai`` branch)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

DEFAULT_BASE_URL = "https://api.openai.com/v1"


MAX_NUM_RESULTS = 50  # the API's upper bound


COMPARISONS = {"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"}


COMPOUNDS = {"and", "or"}


def check_openai_filter(value: Any, where: str = "filter") -> None:
    """Validate an OpenAI attribute filter (comparison or compound) before any traffic."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object")
    kind = value.get("type")
    if kind in COMPARISONS:
        extra = set(value) - {"type", "key", "value"}
        if extra or not isinstance(value.get("key"), str) or "value" not in value:
            raise ValueError(f"{where}: a '{kind}' filter needs exactly 'key' and 'value'")
    elif kind in COMPOUNDS:
        parts = value.get("filters")
        if set(value) - {"type", "filters"} or not isinstance(parts, list) or not parts:
            raise ValueError(f"{where}: an '{kind}' filter needs a non-empty 'filters' list")
        for i, part in enumerate(parts):
            check_openai_filter(part, f"{where}.filters[{i}]")
    else:
        raise ValueError(
            f"{where}: type must be one of {sorted(COMPARISONS | COMPOUNDS)}, got {kind!r}"
        )


class OpenAIFileSearchSettings(BaseModel):
    """``backend_config`` of an ``openai`` retriever (field names of a ``rag`` plugin
    configuration block, so one pastes in unchanged)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    vector_store_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")
    api_key: SecretStr | None = None
    api_key_env: str = Field(default="OPENAI_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    base_url: str = DEFAULT_BASE_URL
    max_num_results: int | None = Field(default=None, ge=1, le=MAX_NUM_RESULTS)
    filter: dict[str, Any] | None = None
    rewrite_query: bool = False
    direct_search: Literal[True] = Field(
        default=True, description="only direct vector-store search is implemented"
    )
    max_response_bytes: int | None = Field(
        default=None, ge=0, description="response body cap; omitted or 0 = 4 MiB"
    )
    max_retries: int = Field(
        default=2, ge=0, le=10, description="retries of transient failures (reset, 502/503/504)"
    )
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    connect_timeout_seconds: float | None = Field(default=None, gt=0, le=600)
    organization: str | None = None
    project: str | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        """With or without the API version: ``https://api.openai.com`` and
        ``https://api.openai.com/v1`` are the same server (vLLM Semantic Router accepts both)."""
        if not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http:// or https:// URL")
        value = value.rstrip("/")
        return value if value.endswith("/v1") else f"{value}/v1"

    @field_validator("filter")
    @classmethod
    def _valid_filter(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_openai_filter(value)
        return value

    def resolved_api_key(self) -> SecretStr | None:
        """The configured key, else the environment's."""
        if self.api_key is not None:
            return self.api_key
        from_env = os.environ.get(self.api_key_env)
        return SecretStr(from_env) if from_env else None
