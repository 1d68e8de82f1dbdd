"""``external_api``: retrieval from a search service over HTTP, in the service's own wire format.

``endpoint`` is the full URL that is POSTed to. ``request_format`` picks the contract:

- ``pinecone``: the Pinecone query API (``POST https://INDEX_HOST/query``). The query is embedded
  with the pipeline's embedding model and sent as ``vector`` with ``topK``, ``includeMetadata``,
  ``namespace`` and a Pinecone metadata ``filter`` (``{"tenant": {"$eq": "acme"}}``, ``$and`` for
  several). Answers ``{"matches": [{"id", "score", "metadata"}]}``; the text is
  ``metadata[content_field]``. Kind: **dense** (``similarity_threshold`` drops matches whose
  cosine score is below it). Auth: ``Api-Key: KEY``.
- ``weaviate``: a GraphQL ``Get`` query (``POST http://HOST/v1/graphql``) on ``class_name``,
  with ``nearText`` (``search: near_text``, the default; kind **dense**, score = 1 - cosine
  distance, threshold sent as the maximum ``distance``) or ``bm25`` (``search: bm25``; kind
  **lexical**, no threshold) and a ``where`` filter (``Equal`` on each key, ``And`` for several).
  Returns ``content_field`` plus ``properties`` as metadata. Auth: ``Authorization: Bearer KEY``.
- ``elasticsearch``: ``POST http://HOST/INDEX/_search`` with a ``bool`` query: ``match`` on
  ``content_field`` plus one ``term`` filter per key (``filter_field_suffix: .keyword`` for
  dynamically mapped text fields). Kind **lexical** (BM25 scores: no threshold).
  Auth: ``Authorization: ApiKey KEY``.
- ``custom``: ``request_template`` is a JSON text with placeholders, each replaced by a JSON
  value: ``{{query}}`` by the JSON-escaped query (write it inside quotes: ``"{{query}}"``),
  ``{{top_k}}`` by an integer, ``{{threshold}}`` by a number or ``null`` and ``{{filters}}`` by a
  JSON object of the equality filters. A request with filters (a tenant, say) is refused when the
  template has no ``{{filters}}``: an unfiltered search could mix tenants. The answer's list is
  at ``results_path`` with ``id_field``/``content_field``/``score_field``/``metadata_field``
  per item. Kind: ``retrieval_kind`` (default **lexical**). Auth: ``Authorization: Bearer KEY``.

``auth_header`` renames the header that carries ``api_key`` (its value is then the bare key
unless ``auth_scheme`` is set); ``headers`` are sent as they are. A hit whose metadata
contradicts the request's filters is dropped as a last line of defence. Responses are capped
by ``max_response_bytes`` (omitted or 0 = 4 MiB).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from parallel_rag.backends.base import (
    MetadataFilter,
    SearchKwargsRetriever,
    contradicts,
    scored_document,
)
from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings
from parallel_rag.backends.external_api.settings import (
    GRAPHQL_NAME,
    PLACEHOLDER,
    PLACEHOLDERS,
    ExternalAPISettings,
    RequestFormat,
    check_template,
    render_template,
    threshold_refusal,
)
from parallel_rag.backends.shared.json_http import BackendResponseError, JSONHTTPClient, require
from parallel_rag.backends.shared.secrets import secret_value
from pydantic import ConfigDict, Field, PrivateAttr

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "RequestFormat",
    "PLACEHOLDER",
    "PLACEHOLDERS",
    "GRAPHQL_NAME",
    "render_template",
    "ExternalAPISettings",
    "check_template",
    "threshold_refusal",
]

DEFAULT_AUTH = {
    "pinecone": ("Api-Key", ""),
    "weaviate": ("Authorization", "Bearer"),
    "elasticsearch": ("Authorization", "ApiKey"),
    "custom": ("Authorization", "Bearer"),
}
PINECONE_API_VERSION = "2025-04"


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BackendResponseError(f"{where}: score is not a number")
    try:
        return float(value)
    except ValueError:
        raise BackendResponseError(f"{where}: score {value!r} is not a number") from None


def _graphql_value(value: Any) -> str:
    if isinstance(value, bool):
        return f"valueBoolean: {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"valueInt: {value}"
    if isinstance(value, float):
        return f"valueNumber: {value!r}"
    return f"valueText: {json.dumps(str(value))}"


def weaviate_where(filters: MetadataFilter) -> str:
    """Weaviate's ``where`` filter: ``Equal`` per key, joined with ``And``."""
    operands = []
    for key, value in filters.items():
        if not GRAPHQL_NAME.match(key):
            raise ValueError(f"filter key {key!r} is not a valid Weaviate property name")
        operands.append(f"{{path: [{json.dumps(key)}], operator: Equal, {_graphql_value(value)}}}")
    if len(operands) == 1:
        return operands[0]
    return f"{{operator: And, operands: [{', '.join(operands)}]}}"


def pinecone_filter(filters: MetadataFilter) -> dict[str, Any]:
    """Pinecone's metadata filter language: ``$eq`` per key, ``$and`` for several."""
    clauses = [{key: {"$eq": value}} for key, value in filters.items()]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class ExternalAPIRetriever(SearchKwargsRetriever):
    """Retriever over an HTTP search service; usable alone in any LangChain chain."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    settings: ExternalAPISettings
    k: int = Field(default=10, gt=0)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    embedding_model: str = BUNDLED
    device: str = "cpu"
    embeddings: Embeddings | None = Field(default=None, exclude=True, repr=False)
    _http: JSONHTTPClient | None = PrivateAttr(default=None)

    @property
    def retrieval_kind(self) -> Literal["lexical", "dense"]:
        return self.settings.kind

    def _client(self) -> JSONHTTPClient:
        if self._http is None:
            s = self.settings
            self._http = JSONHTTPClient(
                service=f"external_api ({s.request_format})",
                timeout_seconds=s.timeout_seconds,
                connect_timeout_seconds=s.connect_timeout_seconds,
                max_response_bytes=s.max_response_bytes,
                secrets=[s.api_key, *s.headers.values()],
                max_retries=s.max_retries,
            )
        return self._http

    def _headers(self) -> dict[str, str]:
        s = self.settings
        headers = {name: value.get_secret_value() for name, value in s.headers.items()}
        key = secret_value(s.api_key)
        if key:
            name, scheme = DEFAULT_AUTH[s.request_format]
            if s.auth_header is not None:
                name, scheme = s.auth_header, ""
            if s.auth_scheme is not None:
                scheme = s.auth_scheme
            headers[name] = f"{scheme} {key}" if scheme else key
        if s.request_format == "pinecone":
            headers.setdefault("X-Pinecone-API-Version", PINECONE_API_VERSION)
        return headers

    def _embed(self, query: str) -> list[float]:
        model = self.embeddings or load_embeddings(self.embedding_model, self.device)
        return list(model.embed_query(query))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        limit = k or self.k
        filters = dict(filters or {})
        fmt = self.settings.request_format
        body = getattr(self, f"_request_{fmt}")(query, limit, filters)
        answer = self._client().post(self.settings.endpoint, body, self._headers())
        docs = getattr(self, f"_parse_{fmt}")(answer)
        kept = [d for d in docs if not contradicts(d.metadata, filters)]
        if self.score_threshold is not None and self.settings.kind == "dense":
            kept = [d for d in kept if d.metadata["retrieval_score"] >= self.score_threshold]
        return kept[:limit]

    # -- pinecone -----------------------------------------------------------------------
    def _request_pinecone(self, query: str, k: int, filters: MetadataFilter) -> dict[str, Any]:
        body: dict[str, Any] = {
            "vector": self._embed(query),
            "topK": k,
            "includeMetadata": True,
            "includeValues": False,
        }
        if self.settings.namespace:
            body["namespace"] = self.settings.namespace
        if filters:
            body["filter"] = pinecone_filter(filters)
        return body

    def _parse_pinecone(self, answer: Any) -> list[Document]:
        docs = []
        for i, match in enumerate(require(answer, "matches", "pinecone response", list)):
            where = f"pinecone response: matches[{i}]"
            doc_id = require(match, "id", where, str)
            score = _number(require(match, "score", where), where)
            metadata = dict(require(match, "metadata", where, dict))
            content = require(metadata, self.settings.content_field, f"{where}.metadata", str)
            metadata.pop(self.settings.content_field)
            docs.append(scored_document(doc_id, content, metadata, score))
        return docs

    # -- weaviate -----------------------------------------------------------------------
    def _request_weaviate(self, query: str, k: int, filters: MetadataFilter) -> dict[str, Any]:
        s = self.settings
        arguments = []
        if s.search == "near_text":
            near = f"concepts: [{json.dumps(query)}]"
            if self.score_threshold is not None:
                near += f", distance: {round(1.0 - self.score_threshold, 6)!r}"
            arguments.append(f"nearText: {{{near}}}")
            additional = "id distance"
        else:
            arguments.append(
                f"bm25: {{query: {json.dumps(query)}, properties: [{json.dumps(s.content_field)}]}}"
            )
            additional = "id score"
        arguments.append(f"limit: {int(k)}")
        if filters:
            arguments.append(f"where: {weaviate_where(filters)}")
        fields = " ".join(dict.fromkeys([s.content_field, *s.properties]))
        graphql = (
            f"{{ Get {{ {s.class_name}({', '.join(arguments)}) "
            f"{{ {fields} _additional {{ {additional} }} }} }} }}"
        )
        return {"query": graphql}

    def _parse_weaviate(self, answer: Any) -> list[Document]:
        s = self.settings
        if isinstance(answer, Mapping) and answer.get("errors"):
            messages = [
                str(e.get("message", e)) if isinstance(e, Mapping) else str(e)
                for e in answer["errors"]
            ]
            raise BackendResponseError(f"weaviate GraphQL errors: {'; '.join(messages)[:300]}")
        data = require(answer, "data", "weaviate response", dict)
        get = require(data, "Get", "weaviate response: data", dict)
        objects = require(get, s.class_name, "weaviate response: data.Get", list)
        docs = []
        for i, obj in enumerate(objects):
            where = f"weaviate response: data.Get.{s.class_name}[{i}]"
            content = require(obj, s.content_field, where, str)
            extra = require(obj, "_additional", where, dict)
            doc_id = require(extra, "id", f"{where}._additional", str)
            if s.search == "near_text":
                score = 1.0 - _number(require(extra, "distance", f"{where}._additional"), where)
            else:
                score = _number(require(extra, "score", f"{where}._additional"), where)
            metadata = {
                key: value
                for key, value in obj.items()
                if key not in (s.content_field, "_additional") and value is not None
            }
            docs.append(scored_document(doc_id, content, metadata, score))
        return docs

    # -- elasticsearch ------------------------------------------------------------------
    def _request_elasticsearch(self, query: str, k: int, filters: MetadataFilter) -> dict[str, Any]:
        suffix = self.settings.filter_field_suffix
        boolean: dict[str, Any] = {"must": [{"match": {self.settings.content_field: query}}]}
        if filters:
            boolean["filter"] = [{"term": {f"{key}{suffix}": v}} for key, v in filters.items()]
        return {"size": k, "query": {"bool": boolean}, "track_total_hits": False}

    def _parse_elasticsearch(self, answer: Any) -> list[Document]:
        outer = require(answer, "hits", "elasticsearch response", dict)
        docs = []
        for i, hit in enumerate(require(outer, "hits", "elasticsearch response: hits", list)):
            where = f"elasticsearch response: hits.hits[{i}]"
            doc_id = str(require(hit, "_id", where, str | int))
            score = _number(require(hit, "_score", where), where)
            source = dict(require(hit, "_source", where, dict))
            content = require(source, self.settings.content_field, f"{where}._source", str)
            source.pop(self.settings.content_field)
            docs.append(scored_document(doc_id, content, source, score))
        return docs

    # -- custom -------------------------------------------------------------------------
    def _request_custom(self, query: str, k: int, filters: MetadataFilter) -> Any:
        template = self.settings.request_template or ""
        if filters and "filters" not in PLACEHOLDER.findall(template):
            raise ValueError(
                "the request has filters (or a tenant) but request_template has no {{filters}} "
                "placeholder; refusing to run an unfiltered search"
            )
        return json.loads(
            render_template(
                template, query=query, top_k=k, threshold=self.score_threshold, filters=filters
            )
        )

    def _parse_custom(self, answer: Any) -> list[Document]:
        s = self.settings
        items: Any = answer
        walked = "custom response"
        for part in s.results_path.split(".") if s.results_path else []:
            items = require(items, part, walked)
            walked = f"{walked}.{part}"
        if not isinstance(items, list):
            raise BackendResponseError(f"{walked}: expected a list, got {type(items).__name__}")
        docs = []
        for i, item in enumerate(items):
            where = f"{walked}[{i}]"
            doc_id = str(require(item, s.id_field, where, str | int))
            content = require(item, s.content_field, where, str)
            score = 0.0
            if s.score_field:
                score = _number(require(item, s.score_field, where), where)
            if s.metadata_field:
                metadata = item.get(s.metadata_field) or {}
                if not isinstance(metadata, dict):
                    raise BackendResponseError(f"{where}: field '{s.metadata_field}' not an object")
                metadata = dict(metadata)
            else:
                skip = {s.id_field, s.content_field, s.score_field}
                metadata = {key: v for key, v in item.items() if key not in skip}
            docs.append(scored_document(doc_id, content, metadata, score))
        return docs
