"""The ``backend_config`` of an ``external_api`` retriever and the checks of a custom request
template: pydantic and the standard library only, so the configuration schema holds it without
importing the HTTP client (``retriever.py`` does, when a configuration builds an
``external_api`` branch)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

RequestFormat = Literal["pinecone", "weaviate", "elasticsearch", "custom"]


PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")


PLACEHOLDERS = {"query", "top_k", "threshold", "filters"}


GRAPHQL_NAME = re.compile(r"^[_A-Za-z][_0-9A-Za-z]*$")


def render_template(
    template: str, *, query: str, top_k: int, threshold: float | None, filters: Mapping[str, Any]
) -> str:
    """Fill a custom request template; every value is JSON-encoded (strings escaped)."""
    values = {
        "query": json.dumps(query, ensure_ascii=False)[1:-1],
        "top_k": json.dumps(int(top_k)),
        "threshold": json.dumps(threshold),
        "filters": json.dumps(dict(filters), ensure_ascii=False),
    }
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


class ExternalAPISettings(BaseModel):
    """``backend_config`` of an ``external_api`` retriever (field names of a
    ``rag`` plugin configuration block, so one pastes in, plus the
    per-format response mapping)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    endpoint: str = Field(min_length=1, description="full URL the search request is POSTed to")
    request_format: RequestFormat
    request_template: str | None = None
    api_key: SecretStr | None = None
    auth_header: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{1,64}$")
    auth_scheme: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{0,32}$")
    headers: dict[str, SecretStr] = Field(
        default_factory=dict, description="sent as given; values are treated as secrets"
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    connect_timeout_seconds: float | None = Field(default=None, gt=0, le=600)
    max_response_bytes: int | None = Field(
        default=None, ge=0, description="response body cap; omitted or 0 = 4 MiB"
    )
    max_retries: int = Field(
        default=2, ge=0, le=10, description="retries of transient failures (reset, 502/503/504)"
    )
    content_field: str = Field(default="content", min_length=1)
    # pinecone
    namespace: str | None = None
    # weaviate
    class_name: str | None = None
    search: Literal["near_text", "bm25"] = "near_text"
    properties: list[str] = Field(default_factory=list)
    # elasticsearch
    filter_field_suffix: str = ""
    # custom
    results_path: str = "results"
    id_field: str = "id"
    score_field: str | None = "score"
    metadata_field: str | None = "metadata"
    retrieval_kind: Literal["lexical", "dense"] | None = None

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in value:
            if not re.match(r"^[A-Za-z0-9-]{1,64}$", name):
                raise ValueError(f"invalid header name {name!r}")
        return value

    @model_validator(mode="after")
    def _per_format(self) -> ExternalAPISettings:
        fmt = self.request_format
        if fmt == "custom":
            if not self.request_template:
                raise ValueError("request_template: required when request_format is 'custom'")
            check_template(self.request_template)
        elif self.request_template is not None:
            raise ValueError(f"request_template: only used by request_format 'custom', not {fmt}")
        if fmt == "weaviate":
            if not self.class_name:
                raise ValueError("class_name: required when request_format is 'weaviate'")
            for name in [self.class_name, self.content_field, *self.properties]:
                if not GRAPHQL_NAME.match(name):
                    raise ValueError(f"weaviate: {name!r} is not a valid GraphQL name")
        if self.retrieval_kind is not None and fmt != "custom":
            raise ValueError(f"retrieval_kind: only settable for 'custom' (fixed for {fmt})")
        return self

    @property
    def kind(self) -> Literal["lexical", "dense"]:
        """Which views this backend takes: dense formats also receive HyDE passages."""
        if self.request_format == "pinecone":
            return "dense"
        if self.request_format == "weaviate":
            return "dense" if self.search == "near_text" else "lexical"
        if self.request_format == "custom":
            return self.retrieval_kind or "lexical"
        return "lexical"

    @property
    def has_comparable_similarity(self) -> bool:
        """Whether ``similarity_threshold`` can apply (custom passes it to the service)."""
        return self.kind == "dense" or self.request_format == "custom"


def check_template(template: str) -> None:
    """A custom template must use only known placeholders, include the query, and render to
    a JSON object."""
    names = set(PLACEHOLDER.findall(template))
    unknown = names - PLACEHOLDERS
    if unknown:
        raise ValueError(
            f"request_template: unknown placeholder(s) {sorted(unknown)}; "
            f"known: {sorted(PLACEHOLDERS)}"
        )
    if "query" not in names:
        raise ValueError("request_template: must contain the {{query}} placeholder")
    sample = render_template(
        template, query='sample "query" \\ text', top_k=3, threshold=0.5, filters={"k": "v"}
    )
    try:
        rendered = json.loads(sample)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"request_template: not valid JSON once filled in ({error.msg} at char {error.pos}); "
            'write string placeholders inside quotes: "{{query}}"'
        ) from None
    if not isinstance(rendered, dict):
        raise ValueError("request_template: must be a JSON object")


def threshold_refusal(settings: ExternalAPISettings) -> str | None:
    """Why ``similarity_threshold`` cannot apply to these settings (None when it can)."""
    if settings.has_comparable_similarity:
        return None
    return (
        f"does not apply to request_format '{settings.request_format}' (search: "
        f"{settings.search}): its scores are BM25 scores, not a similarity"
    )
