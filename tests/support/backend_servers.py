"""Loopback HTTP servers speaking each search product's documented wire format, for the
``external_api`` and ``openai`` backend tests.

Each server runs in-process (``http.server.ThreadingHTTPServer`` on 127.0.0.1, a free port, a
daemon thread), checks auth and the request shape the product documents, searches a small
multi-tenant corpus for real (cosine over the packaged MiniLM embeddings, or term matching for
the lexical products) and answers in the product's response format:

- Pinecone: ``POST /query`` (vector, topK, filter with ``$eq``/``$ne``/``$in``/``$and``/``$or``,
  includeMetadata, namespace) -> ``{"matches": [{"id", "score", "values", "metadata"}], ...}``
- Weaviate: ``POST /v1/graphql`` with a ``Get`` query (parsed by graphql-core): ``nearText``
  (concepts, distance) or ``bm25`` (query, properties), ``limit``, ``where`` -> ``{"data":
  {"Get": {Class: [...]}}}`` with ``_additional {id distance score}``
- Elasticsearch: ``POST /INDEX/_search`` with ``bool`` ``must: match`` + ``filter: term`` ->
  ``{"hits": {"total", "max_score", "hits": [{"_index", "_id", "_score", "_source"}]}}``
- OpenAI: ``POST /v1/vector_stores/{id}/search`` (query, max_num_results, filters,
  ranking_options) -> ``vector_store.search_results.page``
- a custom JSON API: ``POST /search`` ``{"q", "k", "filters"}`` -> ``{"results": [...]}``
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

TENANT_DOCS = [
    {
        "id": "acme-bridge",
        "tenant": "acme",
        "source": "acme/bridges.md",
        "content": "The Golden Gate Bridge opened in 1937 and spans the Golden Gate strait.",
    },
    {
        "id": "globex-bridge",
        "tenant": "globex",
        "source": "globex/bridges.md",
        "content": "The Golden Gate Bridge is a suspension bridge that opened to traffic in 1937.",
    },
    {
        "id": "acme-comet",
        "tenant": "acme",
        "source": "acme/comets.md",
        "content": "Halley's Comet returns to the inner Solar System about every 76 years.",
    },
    {
        "id": "globex-comet",
        "tenant": "globex",
        "source": "globex/comets.md",
        "content": "Halley's Comet is a short-period comet seen from Earth every 75 to 79 years.",
    },
    {
        "id": "acme-unix",
        "tenant": "acme",
        "source": "acme/unix.md",
        "content": "Unix was developed at Bell Labs by Ken Thompson and Dennis Ritchie in 1969.",
    },
    {
        "id": "globex-eniac",
        "tenant": "globex",
        "source": "globex/eniac.md",
        "content": "ENIAC, completed in 1945, was the first programmable general-purpose computer.",
    },
]
BRIDGE_QUESTION = "When did the Golden Gate Bridge open?"
_STOP = {"the", "a", "an", "of", "in", "to", "is", "and", "did", "when", "what", "was", "by"}


def terms(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOP]


def lexical_score(query: str, text: str) -> float:
    wanted, present = set(terms(query)), terms(text)
    return float(sum(1 for t in present if t in wanted))


class VectorIndex:
    """Unit vectors of the corpus by the given embedding model; cosine search."""

    def __init__(self, embeddings, docs: list[dict[str, Any]]):
        self.embeddings = embeddings
        self.docs = docs
        self.vectors = np.asarray(embeddings.embed_documents([d["content"] for d in docs]))

    def embed(self, text: str) -> np.ndarray:
        return np.asarray(self.embeddings.embed_query(text))

    def cosine(self, vector: Iterable[float]) -> list[float]:
        query = np.asarray(list(vector), dtype=float)
        norms = np.linalg.norm(self.vectors, axis=1) * (np.linalg.norm(query) or 1.0)
        return (self.vectors @ query / norms).tolist()


# ------------------------------------------------------------------------------- the server


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON value, bytes, or an iterator of byte chunks (sent chunked)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (free port) answering with ``route(request)``."""

    def __init__(self, route: Callable[[Seen], Reply]):
        self.route = route
        self.requests: list[Seen] = []
        self.bytes_sent = 0
        self.stopped = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - quiet
                return

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen("POST", self.path, dict(self.headers.items()), self.rfile.read(length))
                owner.requests.append(seen)
                owner._answer(self, owner.route(seen))

            do_GET = do_POST  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def _answer(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.delay:
            self.stopped.wait(reply.delay)
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if isinstance(reply.body, Iterator):
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                for chunk in reply.body:
                    if self.stopped.is_set():
                        break
                    handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.bytes_sent += len(chunk)
                handler.wfile.write(b"0\r\n\r\n")
                return
            raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            if "Content-Type" not in reply.headers:
                handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
            self.bytes_sent += len(raw)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def error_reply(status: int, message: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "invalid_request_error"}})


# ------------------------------------------------------------------------------- products


def _pinecone_match(metadata: dict[str, Any], flt: dict[str, Any]) -> bool:
    """Pinecone's metadata filter language (the subset of operators used here)."""
    for key, cond in flt.items():
        if key == "$and":
            if not all(_pinecone_match(metadata, c) for c in cond):
                return False
        elif key == "$or":
            if not any(_pinecone_match(metadata, c) for c in cond):
                return False
        else:
            ops = cond if isinstance(cond, dict) else {"$eq": cond}
            for op, operand in ops.items():
                if not compare(op.removeprefix("$"), metadata.get(key), operand):
                    return False
    return True


def compare(op: str, value: Any, operand: Any) -> bool:
    if op == "eq":
        return value == operand
    if op == "ne":
        return value != operand
    if op == "in":
        return value in operand
    if op == "nin":
        return value not in operand
    raise ValueError(f"unsupported operator {op}")


def pinecone_route(index: VectorIndex, api_key: str, namespace: str = "") -> Callable:
    allowed = {"namespace", "vector", "topK", "filter", "includeValues", "includeMetadata", "id"}

    def route(request: Seen) -> Reply:
        if request.headers.get("Api-Key") != api_key:
            return Reply(401, {"code": 16, "message": "Invalid API Key", "details": []})
        if request.path != "/query":
            return Reply(404, {"code": 5, "message": "Not Found", "details": []})
        body = request.json()
        unknown = set(body) - allowed
        vector = body.get("vector")
        if unknown or not isinstance(body.get("topK"), int) or not isinstance(vector, list):
            return Reply(400, {"code": 3, "message": f"invalid query {sorted(unknown)}"})
        if len(vector) != index.vectors.shape[1]:
            return Reply(400, {"code": 3, "message": "Vector dimension does not match"})
        if body.get("namespace", "") != namespace:
            return Reply(200, {"results": [], "matches": [], "namespace": body["namespace"]})
        scores = index.cosine(vector)
        flt = body.get("filter") or {}
        ranked = sorted(
            (i for i, d in enumerate(index.docs) if _pinecone_match(d, flt)),
            key=lambda i: -scores[i],
        )[: body["topK"]]
        matches = []
        for i in ranked:
            doc = index.docs[i]
            metadata = {k: v for k, v in doc.items() if k != "id"}
            match = {"id": doc["id"], "score": scores[i], "values": []}
            if body.get("includeMetadata"):
                match["metadata"] = metadata
            matches.append(match)
        return Reply(
            200,
            {"results": [], "matches": matches, "namespace": namespace, "usage": {"readUnits": 5}},
        )

    return route


def _where_match(doc: dict[str, Any], where: dict[str, Any]) -> bool:
    operator = where["operator"]
    if operator in ("And", "Or"):
        results = [_where_match(doc, w) for w in where["operands"]]
        return all(results) if operator == "And" else any(results)
    (key,) = where["path"]
    value_keys = [k for k in where if k.startswith("value")]
    expected = where[value_keys[0]]
    if operator == "Equal":
        return doc.get(key) == expected
    if operator == "NotEqual":
        return doc.get(key) != expected
    raise ValueError(f"unsupported operator {operator}")


def weaviate_route(index: VectorIndex, class_name: str, api_key: str) -> Callable:
    from graphql import parse
    from graphql.language import FieldNode, OperationDefinitionNode
    from graphql.utilities import value_from_ast_untyped

    def route(request: Seen) -> Reply:
        if request.headers.get("Authorization") != f"Bearer {api_key}":
            return Reply(401, {"code": 401, "message": "unauthorized: invalid api key"})
        if request.path != "/v1/graphql":
            return Reply(404, {"code": 404, "message": "path not found"})
        try:
            document = parse(request.json()["query"])
        except Exception as error:  # noqa: BLE001 - GraphQL syntax errors are answered
            return Reply(200, {"errors": [{"message": f"syntax error: {error}"}]})
        operation = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode))
        get = operation.selection_set.selections[0]
        assert isinstance(get, FieldNode) and get.name.value == "Get"
        target = get.selection_set.selections[0]
        if target.name.value != class_name:
            message = f'Cannot query field "{target.name.value}" on type "GetObjectsObj".'
            return Reply(200, {"errors": [{"message": message}], "data": None})
        args = {a.name.value: value_from_ast_untyped(a.value) for a in target.arguments}
        fields, additional = [], []
        for selection in target.selection_set.selections:
            if selection.name.value == "_additional":
                additional = [s.name.value for s in selection.selection_set.selections]
            else:
                fields.append(selection.name.value)
        candidates = list(range(len(index.docs)))
        if "where" in args:
            candidates = [i for i in candidates if _where_match(index.docs[i], args["where"])]
        scored: list[tuple[int, float]] = []
        if "nearText" in args:
            near = args["nearText"]
            cosines = index.cosine(index.embed(" ".join(near["concepts"])))
            for i in candidates:
                distance = 1.0 - cosines[i]
                if "distance" in near and distance > near["distance"]:
                    continue
                scored.append((i, distance))
            scored.sort(key=lambda pair: pair[1])
        elif "bm25" in args:
            query = args["bm25"]["query"]
            props = args["bm25"].get("properties") or ["content"]
            for i in candidates:
                score = sum(lexical_score(query, str(index.docs[i].get(p, ""))) for p in props)
                if score > 0:
                    scored.append((i, score))
            scored.sort(key=lambda pair: -pair[1])
        objects = []
        for i, value in scored[: int(args.get("limit", 10))]:
            doc = index.docs[i]
            obj: dict[str, Any] = {name: doc.get(name) for name in fields}
            extra: dict[str, Any] = {}
            for name in additional:
                if name == "id":
                    extra["id"] = f"00000000-0000-0000-0000-{i:012d}"
                elif name == "distance":
                    extra["distance"] = value
                elif name == "score":
                    extra["score"] = str(value)  # Weaviate returns bm25 scores as strings
            obj["_additional"] = extra
            objects.append(obj)
        return Reply(200, {"data": {"Get": {class_name: objects}}})

    return route


def elasticsearch_route(docs: list[dict[str, Any]], index_name: str, api_key: str) -> Callable:
    def route(request: Seen) -> Reply:
        if request.headers.get("Authorization") != f"ApiKey {api_key}":
            return Reply(
                401,
                {"error": {"type": "security_exception", "reason": "unable to authenticate"}},
            )
        if request.path != f"/{index_name}/_search":
            return Reply(404, {"error": {"type": "index_not_found_exception"}, "status": 404})
        body = request.json()
        boolean = body["query"]["bool"]
        ((match_field, match),) = boolean["must"][0]["match"].items()
        text = match["query"] if isinstance(match, dict) else match
        hits = []
        for doc in docs:
            ok = True
            for clause in boolean.get("filter", []):
                ((field_name, value),) = clause["term"].items()
                ok &= doc.get(field_name.removesuffix(".keyword")) == value
            score = lexical_score(text, str(doc.get(match_field, "")))
            if ok and score > 0:
                hits.append((score, doc))
        hits.sort(key=lambda pair: -pair[0])
        hits = hits[: body.get("size", 10)]
        return Reply(
            200,
            {
                "took": 1,
                "timed_out": False,
                "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                "hits": {
                    "total": {"value": len(hits), "relation": "eq"},
                    "max_score": hits[0][0] if hits else None,
                    "hits": [
                        {
                            "_index": index_name,
                            "_id": doc["id"],
                            "_score": score,
                            "_source": {k: v for k, v in doc.items() if k != "id"},
                        }
                        for score, doc in hits
                    ],
                },
            },
        )

    return route


def _openai_match(attributes: dict[str, Any], flt: dict[str, Any]) -> bool:
    kind = flt["type"]
    if kind in ("and", "or"):
        results = [_openai_match(attributes, f) for f in flt["filters"]]
        return all(results) if kind == "and" else any(results)
    return compare(kind, attributes.get(flt["key"]), flt["value"])


def openai_route(index: VectorIndex, store_id: str, api_key: str) -> Callable:
    pattern = re.compile(r"^/v1/vector_stores/([^/]+)/search$")

    def route(request: Seen) -> Reply:
        if request.headers.get("Authorization") != f"Bearer {api_key}":
            return error_reply(401, "Incorrect API key provided: sk-***. ")
        matched = pattern.match(request.path)
        if not matched:
            return error_reply(404, f"Invalid URL (POST {request.path})")
        if matched.group(1) != store_id:
            return error_reply(404, f"No vector store found with id '{matched.group(1)}'.")
        body = request.json()
        unknown = set(body) - {
            "query",
            "max_num_results",
            "filters",
            "ranking_options",
            "rewrite_query",
        }
        limit = body.get("max_num_results", 10)
        if unknown or not isinstance(body.get("query"), str | list) or not 1 <= limit <= 50:
            return error_reply(400, f"Invalid request: unknown or bad parameters {sorted(unknown)}")
        query = body["query"] if isinstance(body["query"], str) else " ".join(body["query"])
        cosines = index.cosine(index.embed(query))
        threshold = (body.get("ranking_options") or {}).get("score_threshold", 0.0)
        results = []
        for i, doc in enumerate(index.docs):
            attributes = {"tenant": doc["tenant"], "source": doc["source"]}
            attributes.update(doc.get("attributes", {}))  # a file's own attributes, if any
            if body.get("filters") and not _openai_match(attributes, body["filters"]):
                continue
            score = max(0.0, cosines[i])
            if score < threshold:
                continue
            results.append(
                {
                    "file_id": f"file-{doc['id']}",
                    "filename": doc["source"].split("/")[-1],
                    "score": score,
                    "attributes": attributes,
                    "content": [{"type": "text", "text": doc["content"]}],
                }
            )
        results.sort(key=lambda r: -r["score"])
        return Reply(
            200,
            {
                "object": "vector_store.search_results.page",
                "search_query": [query],
                "data": results[:limit],
                "has_more": False,
                "next_page": None,
            },
        )

    return route


def custom_route(docs: list[dict[str, Any]], api_key: str) -> Callable:
    def route(request: Seen) -> Reply:
        if request.headers.get("Authorization") != f"Bearer {api_key}":
            return Reply(403, {"detail": "forbidden"})
        body = request.json()
        filters = body.get("filters") or {}
        hits = [
            (lexical_score(body["q"], d["content"]), d)
            for d in docs
            if all(d.get(k) == v for k, v in filters.items())
        ]
        hits = sorted((h for h in hits if h[0] > 0), key=lambda h: -h[0])[: body["k"]]
        return Reply(
            200,
            {
                "results": [
                    {
                        "id": d["id"],
                        "text": d["content"],
                        "score": s,
                        "metadata": {"tenant": d["tenant"], "source": d["source"]},
                    }
                    for s, d in hits
                ]
            },
        )

    return route
