"""``openai``: OpenAI vector-store file search, called directly (``direct_search``).

``POST {base_url}/vector_stores/{vector_store_id}/search`` (``/v1`` is added to a ``base_url``
without it) with ``query``, ``max_num_results``,
``filters`` (OpenAI's attribute filter language: ``{"type": "eq", "key", "value"}`` per request
filter, joined with the configured ``filter`` by ``{"type": "and", "filters": [...]}``) and
``ranking_options.score_threshold`` from ``similarity_threshold``. Each result chunk becomes a
document: the text parts of ``content`` joined, ``attributes`` plus ``file_id``/``filename`` as
metadata, id ``FILE_ID#<hash of the text>`` (stable across calls). Kind: **dense**.

``api_key`` comes from the config or, when omitted, from ``$OPENAI_API_KEY`` (``api_key_env``).
The response is capped by ``max_response_bytes`` (omitted or 0 = 4 MiB).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BackendSpec,
    BuildRequest,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    SettingError,
    contradicts,
    scored_document,
)
from parallel_rag.backends.shared.json_http import (
    BackendResponseError,
    JSONHTTPClient,
    require,
)
from parallel_rag.backends.shared.secrets import secret_value
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator

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

    model_config = ConfigDict(extra="forbid")

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


def openai_filters(static: dict[str, Any] | None, filters: MetadataFilter | None) -> Any:
    """The request's equality filters in OpenAI's filter language, AND-ed with the static one."""
    clauses: list[dict[str, Any]] = [static] if static else []
    clauses += [{"type": "eq", "key": key, "value": v} for key, v in (filters or {}).items()]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"type": "and", "filters": clauses}


class OpenAIFileSearchRetriever(SearchKwargsRetriever):
    """Dense retriever over an OpenAI vector store; usable alone in any LangChain chain."""

    retrieval_kind: ClassVar[RetrievalKind] = "dense"

    settings: OpenAIFileSearchSettings
    api_key: SecretStr = Field(repr=False)
    k: int = Field(default=10, gt=0)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    _http: JSONHTTPClient | None = PrivateAttr(default=None)

    def _client(self) -> JSONHTTPClient:
        if self._http is None:
            self._http = JSONHTTPClient(
                service="openai file search",
                timeout_seconds=self.settings.timeout_seconds,
                connect_timeout_seconds=self.settings.connect_timeout_seconds,
                max_response_bytes=self.settings.max_response_bytes,
                secrets=[self.api_key],
                max_retries=self.settings.max_retries,
            )
        return self._http

    def _headers(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {secret_value(self.api_key)}"}
        if self.settings.organization:
            headers["OpenAI-Organization"] = self.settings.organization
        if self.settings.project:
            headers["OpenAI-Project"] = self.settings.project
        return headers

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        s = self.settings
        limit = min(k or self.k, s.max_num_results or MAX_NUM_RESULTS)
        body: dict[str, Any] = {
            "query": query,
            "max_num_results": limit,
            "rewrite_query": s.rewrite_query,
        }
        combined = openai_filters(s.filter, filters)
        if combined is not None:
            body["filters"] = combined
        if self.score_threshold is not None:
            body["ranking_options"] = {"ranker": "auto", "score_threshold": self.score_threshold}
        url = f"{s.base_url}/vector_stores/{s.vector_store_id}/search"
        answer = self._client().post(url, body, self._headers())
        docs = [d for d in parse_search_page(answer) if not contradicts(d.metadata, filters)]
        if self.score_threshold is not None:
            docs = [d for d in docs if d.metadata["retrieval_score"] >= self.score_threshold]
        return docs[:limit]


def parse_search_page(answer: Any) -> list[Document]:
    """Documents from a ``vector_store.search_results.page``."""
    docs = []
    for i, item in enumerate(require(answer, "data", "openai search response", list)):
        where = f"openai search response: data[{i}]"
        file_id = require(item, "file_id", where, str)
        score = require(item, "score", where, int | float)
        parts = require(item, "content", where, list)
        texts = []
        for j, part in enumerate(parts):
            if require(part, "type", f"{where}.content[{j}]", str) == "text":
                texts.append(require(part, "text", f"{where}.content[{j}]", str))
        if not texts:
            raise BackendResponseError(f"{where}: no text content")
        content = "\n".join(texts)
        attributes = item.get("attributes") or {}
        if not isinstance(attributes, dict):
            raise BackendResponseError(f"{where}: field 'attributes' should be an object")
        metadata = {**attributes, "file_id": file_id}
        if item.get("filename"):
            metadata["filename"] = item["filename"]
        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
        docs.append(scored_document(f"{file_id}#{digest}", content, metadata, float(score)))
    return docs


def build_retriever(request: BuildRequest) -> OpenAIFileSearchRetriever:
    """The retriever, with the key from the config or else from the environment."""
    settings: OpenAIFileSearchSettings = request.settings
    api_key = settings.resolved_api_key()
    if api_key is None:
        raise SettingError("api_key", f"not set, and ${settings.api_key_env} is empty")
    return OpenAIFileSearchRetriever(
        settings=settings,
        api_key=api_key,
        k=request.k,
        score_threshold=request.entry.similarity_threshold,
    )


BACKEND = BackendSpec(
    name="openai",
    settings=OpenAIFileSearchSettings,
    factory=build_retriever,
    kind=OpenAIFileSearchRetriever.retrieval_kind,
)
