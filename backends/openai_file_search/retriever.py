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
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BuildRequest,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    SettingError,
    contradicts,
    scored_document,
)
from parallel_rag.backends.openai_file_search.settings import (
    COMPARISONS,
    COMPOUNDS,
    DEFAULT_BASE_URL,
    MAX_NUM_RESULTS,
    OpenAIFileSearchSettings,
    check_openai_filter,
)
from parallel_rag.backends.shared.json_http import (
    BackendResponseError,
    JSONHTTPClient,
    require,
)
from parallel_rag.backends.shared.secrets import secret_value
from pydantic import Field, PrivateAttr, SecretStr

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "DEFAULT_BASE_URL",
    "MAX_NUM_RESULTS",
    "COMPARISONS",
    "COMPOUNDS",
    "check_openai_filter",
    "OpenAIFileSearchSettings",
]


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
