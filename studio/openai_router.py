"""The OpenAI-compatible router: ``POST /v1/chat/completions``, ``GET /v1/models`` and
``POST /v1/route/preview``, served beside the LangServe routes by ``parallel-rag serve``.

A request is matched to a route (``graph/routes.py``): ``model`` naming a route selects it;
``model: "auto"`` tries the routes' keywords on the last user message, then its embedding
similarity to each route's description and examples, then ``routing.default``. A route with an
enabled ``rag`` plugin runs its compiled graph up to fusion, formats the fused documents as the
generate node does (numbered, delimited, neutralised evidence cut at ``max_context_length``) and
injects them into the caller's own conversation; every other field of the request goes to the
upstream as sent (``model`` becomes the route's upstream model; the router's own ``rag`` field,
``{top_k, filters, tenant}``, is removed). The upstream's answer comes back as it was, streamed
chunk by chunk when asked, with the route, branches, cited documents and cache outcome in
``x-parallel-rag-*`` headers and, for a JSON answer, in a ``parallel_rag`` field.

Every failure is an OpenAI-style error ``{"error": {"message", "type", "param", "code"}}``:
400 for a malformed body (``param`` names the field), 404 for an unknown model, 503 for
``on_failure: block``, 502 when the upstream is down or fails, 504 when it times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from parallel_rag.backends.embeddings import load_embeddings
from parallel_rag.backends.secrets import redact, register_secrets
from parallel_rag.graph.builder import build_graph, graph_profile
from parallel_rag.graph.routes import (
    AUTO_MODEL,
    Decision,
    RoutePipelineConfig,
    RouterConfig,
    embedding_name,
    load_router,
    retrieval_plan,
    scorer_name,
    store_generation,
    store_locations,
)
from parallel_rag.graph.state import MAX_QUERY_CHARS, MAX_TOP_K, FilterValue
from parallel_rag.nodes.failure_policy import BlockedError
from parallel_rag.nodes.generate.evidence import EVIDENCE_CALL_ID, format_evidence
from parallel_rag.nodes.prompts import EVIDENCE_TOOL_CALL_CONTENT, EVIDENCE_TOOL_NAME
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

logger = logging.getLogger(__name__)
HEADER_PREFIX = "x-parallel-rag-"
RESPONSE_FIELD = "parallel_rag"
MAX_HEADER_CHARS = 2000

# -- errors -------------------------------------------------------------------------------


class RouterError(Exception):
    """A failure answered as an OpenAI-style error."""

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

    def response(self) -> JSONResponse:
        body = {
            "error": {
                "message": redact(self.message),
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }
        return JSONResponse(status_code=self.status, content=body, headers=self.headers)


# -- the request --------------------------------------------------------------------------


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: StrictStr


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[ContentPart] | None = None


class RagOptions(BaseModel):
    """The router's own per-request settings (only these: no endpoint, key or path)."""

    model_config = ConfigDict(extra="forbid")

    top_k: StrictInt | None = Field(default=None, ge=1, le=MAX_TOP_K)
    filters: dict[str, FilterValue] | None = None
    tenant: StrictStr | None = Field(default=None, min_length=1, max_length=128)


class ChatRequest(_Open):
    model: StrictStr = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    rag: RagOptions | None = None


class PreviewRequest(_Open):
    model: StrictStr = Field(default=AUTO_MODEL, min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    rag: RagOptions | None = None


async def read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise RouterError(
            400, f"request body is not valid JSON: {error}", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise RouterError(
            400,
            f"request body must be a JSON object, got {type(data).__name__}",
            code="invalid_json",
        )
    return data


def validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``data`` as ``model``, or a 400 naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problem = error.errors()[0]
        loc = [str(p) for p in problem["loc"] if not str(p).startswith(("function-", "list["))]
        loc = [p for p in loc if p not in {"str", "list[ContentPart]"}]
        param = ".".join(loc) or None
        message = problem["msg"]
        raise RouterError(
            400, f"{param}: {message}" if param else message, code="invalid_value", param=param
        ) from None


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content")).strip()
    return ""


# -- injection ----------------------------------------------------------------------------


def evidence_call_id(messages: Sequence[Mapping[str, Any]]) -> str:
    """The tool call id of the evidence turn, distinct from any id already in the conversation."""
    taken = {
        str(call.get("id"))
        for message in messages
        for call in (message.get("tool_calls") or [])
        if isinstance(call, dict)
    } | {str(m.get("tool_call_id")) for m in messages if m.get("tool_call_id")}
    candidate, n = EVIDENCE_CALL_ID, 0
    while candidate in taken:
        n += 1
        candidate = f"{EVIDENCE_CALL_ID}_{n}"
    return candidate


def inject_tool_role(
    messages: Sequence[Mapping[str, Any]], evidence: str, query: str
) -> list[dict[str, Any]]:
    """After the last user message: an assistant turn calling the evidence tool and the tool
    message answering it (same ``tool_call_id``), so strict OpenAI-compatible servers accept
    the history. Other messages are kept as they were."""
    result = [dict(m) for m in messages]
    last_user = max((i for i, m in enumerate(result) if m.get("role") == "user"), default=None)
    at = len(result) if last_user is None else last_user + 1
    call_id = evidence_call_id(messages)
    call = {
        "role": "assistant",
        "content": EVIDENCE_TOOL_CALL_CONTENT,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": EVIDENCE_TOOL_NAME,
                    "arguments": json.dumps({"query": query}, ensure_ascii=False),
                },
            }
        ],
    }
    answer = {"role": "tool", "tool_call_id": call_id, "content": evidence}
    return result[:at] + [call, answer] + result[at:]


def inject_system_prompt(
    messages: Sequence[Mapping[str, Any]], evidence: str
) -> list[dict[str, Any]]:
    """The evidence prepended to the first system message, or a new system message first."""
    result = [dict(m) for m in messages]
    for message in result:
        if message.get("role") == "system":
            content = message.get("content")
            if isinstance(content, list):
                message["content"] = [{"type": "text", "text": evidence}, *content]
            elif content:
                message["content"] = f"{evidence}\n\n{content}"
            else:
                message["content"] = evidence
            return result
    return [{"role": "system", "content": evidence}, *result]


def inject(
    messages: Sequence[Mapping[str, Any]],
    documents: Sequence[Mapping[str, Any]],
    *,
    mode: str,
    max_context_length: int,
    query: str,
) -> list[dict[str, Any]]:
    evidence = format_evidence(documents, max_context_length)
    if mode == "system_prompt":
        return inject_system_prompt(messages, evidence)
    return inject_tool_role(messages, evidence, query)


# -- the context cache --------------------------------------------------------------------


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    invalidations: int = 0


class ContextCache:
    """One route's retrieved context: an LRU of ``max_entries`` entries living ``ttl`` seconds,
    emptied when the route's stores change (``generation``, a fingerprint of their files)."""

    def __init__(self, max_entries: int, ttl: float, clock=time.monotonic):
        self.max_entries, self.ttl, self.clock = max_entries, ttl, clock
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple, tuple[float, Any]] = OrderedDict()
        self._generation: tuple | None = None
        self._lock = threading.Lock()

    def _check_generation(self, generation: tuple) -> None:
        if generation != self._generation:
            if self._generation is not None:
                self.stats.invalidations += 1
            self._entries.clear()
            self._generation = generation

    def get(self, key: tuple, generation: tuple) -> Any | None:
        with self._lock:
            self._check_generation(generation)
            item = self._entries.get(key)
            if item is None or self.clock() - item[0] > self.ttl:
                if item is not None:
                    del self._entries[key]
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return item[1]

    def put(self, key: tuple, generation: tuple, value: Any) -> None:
        with self._lock:
            self._check_generation(generation)
            self._entries[key] = (self.clock(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def normalised_query(query: str) -> str:
    return " ".join(query.casefold().split())


# -- routes at run time -------------------------------------------------------------------


@dataclass
class RetrievalOutcome:
    documents: list[dict[str, Any]]
    branches: list[dict[str, Any]]
    warnings: list[str]
    cache: str = "off"  # hit | miss | off
    failed: str | None = None  # why there is no context, when retrieval itself failed


@dataclass
class Route:
    decision: Decision
    pipeline: RoutePipelineConfig | None
    graph: Any = None
    cache: ContextCache | None = None
    locations: list[Path] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.decision.name


@dataclass
class RouteChoice:
    route: Route
    reason: str  # model | keyword | similarity | default
    signals: dict[str, Any]


class RouteMatcher:
    """``auto`` routing: keywords, then cosine similarity (the configured embedding model, the
    packaged MiniLM by default) to each route's description and examples, then the default."""

    def __init__(self, config: RouterConfig, routes: Mapping[str, Route]):
        self.config = config
        self.routes = routes
        self.threshold = config.routing.similarity_threshold
        self._texts: dict[str, list[str]] = {
            name: [t for t in [route.decision.description, *route.decision.examples] if t.strip()]
            for name, route in routes.items()
        }
        self._vectors: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _model(self):
        settings = self.config.routing.embeddings
        return load_embeddings(settings.model, settings.device)

    def prepare(self) -> None:
        """Embed every route's description and examples (once, at start-up)."""
        import numpy as np

        with self._lock:
            if self._vectors is not None:
                return
            model = self._model()
            self._vectors = {
                name: np.asarray(model.embed_documents(texts), dtype=np.float32)
                for name, texts in self._texts.items()
                if texts
            }

    def keyword_hits(self, text: str) -> dict[str, list[str]]:
        lowered = text.casefold()
        hits = {}
        for name, route in self.routes.items():
            found = [
                kw
                for kw in route.decision.keywords
                if re.search(rf"(?<!\w){re.escape(kw.casefold())}(?!\w)", lowered)
            ]
            if found:
                hits[name] = found
        return hits

    def similarities(self, text: str) -> dict[str, float]:
        import numpy as np

        self.prepare()
        assert self._vectors is not None
        if not self._vectors or not text:
            return {}
        query = np.asarray(self._model().embed_query(text), dtype=np.float32)
        norm = float(np.linalg.norm(query)) or 1.0
        scores = {}
        for name, vectors in self._vectors.items():
            norms = np.linalg.norm(vectors, axis=1) * norm
            cosine = vectors @ query / np.where(norms == 0, 1, norms)
            scores[name] = round(float(cosine.max()), 4)
        return scores

    def choose(self, model: str, text: str) -> RouteChoice:
        if model != AUTO_MODEL:
            route = self.routes.get(model)
            if route is None:
                raise RouterError(
                    404,
                    f"The model '{model}' does not exist: use a route name "
                    f"({', '.join(self.routes)}) or '{AUTO_MODEL}'",
                    code="model_not_found",
                    param="model",
                )
            return RouteChoice(route, "model", {"model": model})
        signals: dict[str, Any] = {"query": text[:200]}
        keywords = self.keyword_hits(text)
        signals["keywords"] = keywords
        if keywords:
            first = next(name for name in self.routes if name in keywords)
            return RouteChoice(self.routes[first], "keyword", signals)
        scores = self.similarities(text)
        signals["similarity"] = scores
        signals["threshold"] = self.threshold
        if scores:
            best = max(scores, key=lambda name: scores[name])
            if scores[best] >= self.threshold:
                return RouteChoice(self.routes[best], "similarity", signals)
        default = self.config.routing.default
        if default is None:
            raise RouterError(
                404,
                "no route matched this request and routing.default is not set",
                code="model_not_found",
                param="model",
            )
        return RouteChoice(self.routes[default], "default", signals)


# -- the upstream -------------------------------------------------------------------------


class Upstreams:
    """One pooled ``httpx.AsyncClient`` per upstream (base URL, key, timeouts)."""

    def __init__(self) -> None:
        self._clients: dict[tuple, httpx.AsyncClient] = {}

    def client(self, decision: Decision, config: RouterConfig) -> tuple[httpx.AsyncClient, str]:
        upstream = config.upstream_for(decision)
        key = upstream.resolved_api_key()
        t = upstream.timeout_settings
        ident = (upstream.base_url, key, t.connect, t.read, t.write, t.pool)
        client = self._clients.get(ident)
        if client is None:
            headers = {"authorization": f"Bearer {key}"} if key else {}
            if key:
                register_secrets([key])
            client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool),
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            )
            self._clients[ident] = client
        return client, f"{upstream.base_url}/chat/completions"

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def upstream_failure(error: Exception) -> RouterError:
    if isinstance(error, httpx.TimeoutException):
        return RouterError(
            504,
            f"the upstream model server did not answer in time ({type(error).__name__})",
            kind="api_error",
            code="upstream_timeout",
        )
    return RouterError(
        502,
        f"the upstream model server is unreachable: {type(error).__name__}: {error}",
        kind="api_error",
        code="upstream_unavailable",
    )


def upstream_status_error(status: int, body: bytes) -> RouterError | None:
    """A 5xx from the upstream becomes 502; anything else is passed through (None)."""
    if status < 500:
        return None
    snippet = body[:300].decode("utf-8", errors="replace")
    return RouterError(
        502,
        f"the upstream model server failed with HTTP {status}: {snippet}",
        kind="api_error",
        code="upstream_error",
    )


class RelayResponse(StreamingResponse):
    """A streamed upstream answer relayed chunk by chunk; the upstream call is closed however
    the relay ends (finished, failed, or the client went away)."""

    def __init__(self, upstream: httpx.Response, **kwargs: Any):
        self.upstream = upstream
        super().__init__(self._chunks(), **kwargs)

    async def _chunks(self):
        try:
            async for chunk in self.upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as error:
            failure = upstream_failure(error)
            body = {
                "error": {
                    "message": failure.message,
                    "type": failure.kind,
                    "param": None,
                    "code": failure.code,
                }
            }
            yield f"data: {json.dumps(body)}\n\n".encode()

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.upstream.aclose()


# -- the runtime --------------------------------------------------------------------------


def header_value(text: str) -> str:
    """Header-safe text: non-ASCII percent-encoded, bounded in length."""
    safe = urllib.parse.quote(text, safe=" ,;:=/.@_-()[]'!*+?#&%")
    return safe[:MAX_HEADER_CHARS]


class RouterRuntime:
    """The routes of one config with their compiled graphs, caches and upstream clients."""

    def __init__(
        self,
        config: RouterConfig,
        base_dir: Path,
        *,
        graphs: Mapping[str, Any] | None = None,
        compile_graphs: bool = True,
    ):
        self.config = config
        self.base_dir = base_dir
        cache_settings = config.routing.context_cache
        self.routes: dict[str, Route] = {}
        for decision in config.routing.decisions:
            pipeline = config.pipeline_for(decision.name)
            route = Route(decision, pipeline)
            if pipeline is not None:
                route.locations = store_locations(pipeline, base_dir)
                if cache_settings.enabled:
                    route.cache = ContextCache(
                        cache_settings.max_entries, cache_settings.ttl_seconds
                    )
                if graphs is not None and decision.name in graphs:
                    route.graph = graphs[decision.name]
                elif compile_graphs:
                    route.graph = build_graph(
                        pipeline, base_dir=base_dir, name=f"route:{decision.name}"
                    )
            self.routes[decision.name] = route
        self.matcher = RouteMatcher(config, self.routes)
        self.upstreams = Upstreams()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> RouterRuntime:
        config, _, base_dir = load_router(path)
        return cls(config, base_dir, **kwargs)

    def warm_up(self) -> None:
        """Load the matcher's model, and what each route's first request would load (its
        embedding model, its branches' indexes and stores: ``GraphProfile.warm_up``), before
        traffic."""
        self.matcher.prepare()
        for route in self.routes.values():
            profile = graph_profile(route.graph) if route.graph is not None else None
            if profile is not None:
                profile.warm_up()
            elif route.pipeline is not None:
                embeddings = route.pipeline.embeddings
                load_embeddings(embeddings.model, embeddings.device)

    async def aclose(self) -> None:
        await self.upstreams.aclose()

    # -- preview ---------------------------------------------------------------------------

    def preview(self, body: dict[str, Any]) -> dict[str, Any]:
        request = validated(PreviewRequest, body)
        messages = [m.model_dump(exclude_unset=True) for m in request.messages]
        query = last_user_text(messages)
        choice = self.matcher.choose(request.model, query)
        return self.describe(choice, request.rag)

    def describe(self, choice: RouteChoice, options: RagOptions | None) -> dict[str, Any]:
        route = choice.route
        upstream = self.config.upstream_for(route.decision)
        plan = retrieval_plan(route.decision, route.pipeline)
        if plan["retrieval"] and options is not None and options.top_k is not None:
            plan["documents_injected"] = options.top_k
        if plan["retrieval"] and route.cache is not None:
            plan["context_cache"] = {
                "max_entries": route.cache.max_entries,
                "ttl_seconds": route.cache.ttl,
            }
        return {
            "route": route.name,
            "upstream_model": route.decision.model,
            "upstream": upstream.base_url,
            "reason": choice.reason,
            "signals": choice.signals,
            "plan": plan,
        }

    # -- retrieval -------------------------------------------------------------------------

    def cache_key(self, route: Route, query: str, rag_request: dict[str, Any]) -> tuple:
        pipeline = route.pipeline
        assert pipeline is not None
        thresholds = tuple(
            (entry.name, entry.similarity_threshold) for entry in pipeline.retrievers
        )
        return (
            route.name,
            normalised_query(query),
            json.dumps(rag_request.get("filters") or {}, sort_keys=True),
            rag_request.get("tenant"),
            rag_request["top_k"],
            thresholds,
            embedding_name(pipeline),
            scorer_name(pipeline),
        )

    async def retrieve(
        self, route: Route, query: str, options: RagOptions | None
    ) -> RetrievalOutcome:
        rag = route.decision.rag
        assert rag is not None and route.graph is not None
        rag_request: dict[str, Any] = {
            "query": query[:MAX_QUERY_CHARS],
            "top_k": rag.injected_top_k(),
        }
        if options is not None:
            if options.top_k is not None:
                rag_request["top_k"] = options.top_k
            if options.filters:
                rag_request["filters"] = dict(options.filters)
            if options.tenant is not None:
                rag_request["tenant"] = options.tenant
        key = generation = None
        if route.cache is not None:
            key = self.cache_key(route, query, rag_request)
            generation = await asyncio.to_thread(store_generation, route.locations)
            cached = route.cache.get(key, generation)
            if cached is not None:
                return RetrievalOutcome(**{**cached, "cache": "hit"})
        outcome = await self._run_graph(route, rag_request)
        if route.cache is not None:
            outcome.cache = "miss"
            clean = outcome.failed is None and not any(
                b.get("status") == "failed" for b in outcome.branches
            )
            if clean and outcome.documents:
                route.cache.put(
                    key,
                    generation,
                    {
                        "documents": outcome.documents,
                        "branches": outcome.branches,
                        "warnings": outcome.warnings,
                    },
                )
        return outcome

    async def _run_graph(self, route: Route, rag_request: dict[str, Any]) -> RetrievalOutcome:
        warnings: list[str] = []
        try:
            # the stream is closed on return: the run stops after fuse, its tasks are not left
            async with contextlib.aclosing(
                route.graph.astream(rag_request, stream_mode="updates")
            ) as updates:
                async for update in updates:
                    for node, values in (update or {}).items():
                        if not isinstance(values, dict):
                            continue
                        if node == "fuse":
                            return RetrievalOutcome(
                                documents=list(values.get("documents") or []),
                                branches=list(values.get("branches") or []),
                                warnings=warnings + list(values.get("warnings") or []),
                            )
                        warnings.extend(values.get("warnings") or [])
        except BlockedError as error:
            raise RouterError(
                503, str(error), kind="service_unavailable", code="on_failure_block"
            ) from None
        except RouterError:
            raise
        except Exception as error:  # a store or model failure outside the branches' records
            logger.warning("route %s: retrieval failed: %s", route.name, redact(str(error)))
            return RetrievalOutcome(
                [], [], warnings, failed=redact(f"{type(error).__name__}: {error}")
            )
        return RetrievalOutcome([], [], warnings, failed="retrieval produced no fused result")

    # -- chat ------------------------------------------------------------------------------

    async def prepare_chat(self, body: dict[str, Any]) -> tuple[dict[str, Any], Route, dict]:
        """The body to forward, its route, and what to report about it (headers/field)."""
        request = validated(ChatRequest, body)
        messages = body["messages"]
        query = last_user_text(messages)
        if request.model == AUTO_MODEL:  # may embed the message: off the event loop
            choice = await asyncio.to_thread(self.matcher.choose, request.model, query)
        else:
            choice = self.matcher.choose(request.model, query)
        route = choice.route
        report: dict[str, Any] = {"route": route.name, "reason": choice.reason}
        forward = {k: v for k, v in body.items() if k != "rag"}
        forward["model"] = route.decision.model
        rag = route.decision.rag
        if rag is None:
            report["retrieval"] = False
            return forward, route, report
        report["retrieval"] = True
        if not query:
            raise RouterError(
                400,
                "messages: a retrieval route needs a user message with text",
                code="invalid_value",
                param="messages",
            )
        started = time.perf_counter()
        outcome = await self.retrieve(route, query, request.rag)
        report.update(
            context_ms=round((time.perf_counter() - started) * 1000, 2),
            cache=outcome.cache,
            branches=outcome.branches,
            documents=[d["id"] for d in outcome.documents],
            warnings=list(outcome.warnings),
        )
        if route.cache is not None:
            report["cache_stats"] = route.cache.stats
        if not outcome.documents:
            why = outcome.failed or "retrieval found no documents"
            if rag.on_failure == "block":
                raise RouterError(
                    503,
                    f"route {route.name!r}: no context ({why}) and its on_failure policy is "
                    "'block'",
                    kind="service_unavailable",
                    code="on_failure_block",
                    headers=report_headers(report),
                )
            if rag.on_failure == "warn":
                report["warnings"].append(f"no context injected: {why}")
            return forward, route, report
        forward["messages"] = inject(
            messages,
            outcome.documents,
            mode=rag.injection_mode,
            max_context_length=rag.max_context_length,
            query=query,
        )
        return forward, route, report

    async def chat(self, body: dict[str, Any]) -> Response:
        forward, route, report = await self.prepare_chat(body)
        client, url = self.upstreams.client(route.decision, self.config)
        headers = report_headers(report)
        if forward.get("stream"):
            return await self._stream(client, url, forward, headers)
        try:
            answer = await client.post(url, json=forward)
        except httpx.HTTPError as error:
            raise upstream_failure(error) from None
        failure = upstream_status_error(answer.status_code, answer.content)
        if failure is not None:
            failure.headers.update(headers)
            raise failure
        try:
            data = answer.json()
        except ValueError:
            return Response(
                answer.content,
                status_code=answer.status_code,
                headers=headers,
                media_type=answer.headers.get("content-type"),
            )
        if isinstance(data, dict) and answer.status_code < 400:
            data[RESPONSE_FIELD] = report_field(report)
        return JSONResponse(data, status_code=answer.status_code, headers=headers)

    async def _stream(self, client: httpx.AsyncClient, url: str, forward: dict, headers: dict):
        request = client.build_request("POST", url, json=forward)
        try:
            upstream = await client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise upstream_failure(error) from None
        if upstream.status_code >= 400:
            try:
                content = await upstream.aread()
            except httpx.HTTPError as error:
                raise upstream_failure(error) from None
            finally:
                await upstream.aclose()
            failure = upstream_status_error(upstream.status_code, content)
            if failure is not None:
                failure.headers.update(headers)
                raise failure
            return Response(
                content,
                status_code=upstream.status_code,
                headers=headers,
                media_type=upstream.headers.get("content-type"),
            )
        return RelayResponse(
            upstream,
            status_code=upstream.status_code,
            headers={**headers, "cache-control": "no-cache"},
            media_type=upstream.headers.get("content-type", "text/event-stream"),
        )

    def models(self) -> dict[str, Any]:
        data = [{"id": AUTO_MODEL, "object": "model", "created": 0, "owned_by": "parallel-rag"}]
        for route in self.routes.values():
            data.append(
                {
                    "id": route.name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "parallel-rag",
                    "upstream_model": route.decision.model,
                    "retrieval": route.decision.rag is not None,
                    "description": route.decision.description,
                }
            )
        return {"object": "list", "data": data}


def report_headers(report: Mapping[str, Any]) -> dict[str, str]:
    headers = {
        f"{HEADER_PREFIX}route": header_value(report["route"]),
        f"{HEADER_PREFIX}route-reason": report["reason"],
        f"{HEADER_PREFIX}retrieval": "on" if report.get("retrieval") else "off",
    }
    if report.get("retrieval"):
        headers[f"{HEADER_PREFIX}cache"] = report.get("cache", "off")
        if "context_ms" in report:  # measured: the retrieval, or the cache lookup on a hit
            headers[f"{HEADER_PREFIX}context-ms"] = str(report["context_ms"])
        stats = report.get("cache_stats")
        if stats is not None:
            headers[f"{HEADER_PREFIX}cache-hits"] = str(stats.hits)
            headers[f"{HEADER_PREFIX}cache-misses"] = str(stats.misses)
            headers[f"{HEADER_PREFIX}cache-invalidations"] = str(stats.invalidations)
        headers[f"{HEADER_PREFIX}branches"] = header_value(
            ",".join(f"{b['branch']}={b['status']}:{b['hits']}" for b in report.get("branches", []))
        )
        headers[f"{HEADER_PREFIX}documents"] = header_value(
            ",".join(urllib.parse.quote(str(i), safe="") for i in report.get("documents", []))
        )
    if report.get("warnings"):
        headers[f"{HEADER_PREFIX}warning"] = header_value(" | ".join(report["warnings"]))
    return headers


def report_field(report: Mapping[str, Any]) -> dict[str, Any]:
    field_ = {k: v for k, v in report.items() if k != "cache_stats"}
    stats = report.get("cache_stats")
    if stats is not None:
        field_["cache_stats"] = {
            "hits": stats.hits,
            "misses": stats.misses,
            "invalidations": stats.invalidations,
        }
    return json.loads(redact(json.dumps(field_, default=str)))


# -- the FastAPI surface ------------------------------------------------------------------


def openai_routes(runtime: RouterRuntime) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        try:
            return await runtime.chat(await read_json(request))
        except RouterError as error:
            return error.response()

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return runtime.models()

    @router.post("/v1/route/preview")
    async def route_preview(request: Request) -> Response:
        try:
            body = await read_json(request)
            return JSONResponse(await asyncio.to_thread(runtime.preview, body))
        except RouterError as error:
            return error.response()

    return router


def add_openai_routes(app: FastAPI, runtime: RouterRuntime) -> None:
    """Mount the router on ``app`` (the LangServe app: same process, same admission control)."""
    app.include_router(openai_routes(runtime))
    app.router.on_shutdown.append(runtime.aclose)


def create_router_app(config_path: str | Path, *, limits=None, langserve_path: str = "/rag"):
    """The served app for a router config: LangServe at ``langserve_path`` (the file's top-level
    pipeline, else the first retrieving route's graph) plus the OpenAI-compatible routes."""
    from parallel_rag.studio.admission import AdmissionControl, AdmissionLimits
    from parallel_rag.studio.langserve_app import create_app

    config, pipeline, base_dir = load_router(config_path)
    runtime = RouterRuntime(config, base_dir)
    graph = None
    if pipeline is not None:
        graph = build_graph(pipeline, base_dir=base_dir)
    else:
        graph = next((r.graph for r in runtime.routes.values() if r.graph is not None), None)
    limits = limits or AdmissionLimits()
    if graph is not None:
        app = create_app(graph, path=langserve_path, limits=limits)
    else:
        app = FastAPI(title="parallel-rag router")
        app.add_middleware(AdmissionControl, limits=limits)

        @app.get("/healthz")
        async def healthz() -> dict[str, Any]:
            return {"status": "ok"}

    add_openai_routes(app, runtime)
    return app, runtime


def serve_router(
    config_path: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/rag",
    log_level: str = "info",
    limits=None,
) -> None:
    """``parallel-rag serve`` for a config with a ``routing`` section (blocks until stopped)."""
    import uvicorn

    app, runtime = create_router_app(config_path, limits=limits, langserve_path=path)
    runtime.warm_up()
    uvicorn.run(app, host=host, port=port, log_level=log_level)


def preview_question(config_path: str | Path, question: str, model: str = AUTO_MODEL) -> dict:
    """``parallel-rag route "question"``: the preview, without opening any store."""
    config, _, base_dir = load_router(config_path)
    runtime = RouterRuntime(config, base_dir, compile_graphs=False)
    return runtime.preview({"model": model, "messages": [{"role": "user", "content": question}]})
