"""The LangServe app (``parallel-rag serve``): the compiled graph under ``/rag`` with invoke,
batch, stream, stream_events, playground and the schemas, plus ``/healthz``.

A request may set only the per-run knobs of ``graph/context.py`` (as ``config.configurable``:
LangServe speaks only RunnableConfig); anything else there is refused with 422, so no request
can reach another endpoint, key or path. The graph reads the knobs left over its runtime
context (``knobs_from`` in ``graph/context.py``, the one place that maps them).
Bad input is a 422 naming the field; ``on_failure: block`` is a 503 with an OpenAI-style error
body. LangServe is in maintenance mode upstream; LangGraph server (``langgraph dev``) is the
long-term surface, and both serve the same graph.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.encoders import jsonable_encoder  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from langchain_core.runnables import RunnableBinding  # noqa: E402
from parallel_rag.backends.shared.secrets import redact  # noqa: E402
from parallel_rag.graph.builder import (  # noqa: E402
    ConfigSource,
    Served,
    build_graphs,
    graph_of,
    graphs_of,
)
from parallel_rag.graph.context import (  # noqa: E402
    KNOBS,
    KnobError,
    KnobScope,
    RAGContext,
    drop_null_branches,
    knobs_from,
)
from parallel_rag.graph.errors import (  # noqa: E402
    Problem,
    one_line,
    openai_error,
    problems,
    public_details,
)
from parallel_rag.graph.state import RAGRequest  # noqa: E402
from parallel_rag.nodes.failure_policy import BlockedError  # noqa: E402
from parallel_rag.studio.admission import AdmissionControl, AdmissionLimits  # noqa: E402
from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
)
from typing_extensions import TypedDict  # noqa: E402

DEFAULT_PATH = "/rag"
ENDPOINTS = (
    "invoke",
    "batch",
    "stream",
    "stream_events",
    "stream_log",  # the playground renders from it
    "playground",
    "input_schema",
    "output_schema",
    "config_schema",
)


class ChatTurn(TypedDict):
    """One message of a conversation as the OpenAI API writes it (what ``messages`` takes)."""

    role: Literal["user", "assistant", "system"]
    content: str


class ServedRequest(RAGRequest):
    """``RAGRequest`` as served: same validation; optional fields drawn without a null branch
    (the playground's form renderer cannot draw ``{"type": "null"}``), and a conversation
    drawn as ``{role, content}`` turns (LangChain's message models are not a form)."""

    model_config = ConfigDict(title="RAGRequest", json_schema_extra=drop_null_branches)

    messages: list[ChatTurn] | None = Field(
        default=None, description=RAGRequest.model_fields["messages"].description
    )

    @field_validator("messages", mode="before")
    @classmethod
    def _conversation(cls, value: Any) -> Any:  # replaces RAGRequest's: checks, keeps dicts
        if value is not None:
            RAGRequest._conversation(value)
        return value


RunConfig = create_model(
    "RunConfig",
    __config__=ConfigDict(extra="ignore", json_schema_extra=drop_null_branches),
    configurable=(RAGContext | None, None),
)


class ServedGraph(RunnableBinding):
    """The compiled graph as LangServe sees it: its per-request config is exactly the knobs."""

    def config_schema(self, *, include=None) -> type[BaseModel]:
        return RunConfig


def _graph_default(obj: Any) -> Any:
    """JSON for what LangGraph puts in events (``Send``, ``Command``) besides LangChain objects;
    anything else unknown is named by its type only (never its repr: no settings leak)."""
    from langgraph.types import Command, Send
    from langserve.serialization import default

    if isinstance(obj, Send):
        return {"send": obj.node, "arg": obj.arg}
    if isinstance(obj, Command):
        return {"goto": obj.goto, "update": obj.update}
    try:
        return default(obj)
    except TypeError:
        return {"type": type(obj).__name__}


def graph_serializer():
    """LangServe's serializer, taught LangGraph's event values (``/stream_events`` needs it)."""
    import orjson
    from langserve.serialization import WellKnownLCSerializer

    class GraphSerializer(WellKnownLCSerializer):
        def dumps(self, obj: Any) -> bytes:
            # redacted last: stream_log/stream_events carry child runs' raw outputs, and a
            # service may echo the key it was sent in an error body that lands there
            return redact(orjson.dumps(obj, default=_graph_default).decode()).encode()

    return GraphSerializer()


def _refuse(*pairs: Problem) -> RequestValidationError:
    """The 422 for refused knobs, each ``(field under configurable, message)``."""
    return RequestValidationError(
        [
            {
                "loc": ("body", "config", "configurable", *field.split(".")),
                "msg": message,
                "type": "value_error",
            }
            for field, message in pairs
        ]
    )


def make_config_guard(scope: KnobScope | None):
    """LangServe's ``per_req_config_modifier``: keep only whitelisted, valid per-run knobs."""

    def guard(config: dict[str, Any], request: Request) -> dict[str, Any]:
        configurable = dict(config.get("configurable") or {})
        unknown = sorted(key for key in configurable if key not in KNOBS)
        if unknown:
            raise _refuse(
                (unknown[0], f"not a per-run setting; allowed: {sorted(KNOBS)} (got {unknown})")
            )
        try:
            knobs = knobs_from(None, configurable)
            if scope is not None:
                scope.check(knobs)
        except KnobError as error:
            where = [(f.removeprefix("configurable."), m) for f, m in error.problems]
            raise _refuse(*where) from None
        return {"configurable": knobs.model_dump(exclude_none=True)}

    return guard


async def _blocked(request: Request, error: BlockedError) -> JSONResponse:
    body = openai_error(str(error), "service_unavailable", "on_failure_block")
    return JSONResponse(status_code=503, content=body)


def _request_path(path: str) -> str:
    """A problem's path as the request spells it: no ``body``, and input fields (which
    LangServe reports bare) under ``input``."""
    parts = [part for part in path.split(".") if part and part != "body"]
    if parts and parts[0] == "configurable":
        parts.insert(0, "config")
    elif parts and parts[0] not in ("input", "inputs", "config", "kwargs"):
        parts.insert(0, "input")
    return ".".join(parts)


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    """FastAPI's ``detail`` list (a large offending value not echoed back), plus an
    OpenAI-style ``error`` listing the problems and naming the first bad field."""
    details = list(error.errors())
    pairs = [(_request_path(path), message) for path, message in problems(details)]
    pairs = pairs or [("", "invalid request")]
    body = {
        "detail": jsonable_encoder(public_details(details)),
        **openai_error(
            one_line(pairs), "invalid_request_error", "invalid_input", pairs[0][0] or None
        ),
    }
    return JSONResponse(status_code=422, content=body)


async def _invalid_batch_input(request: Request, error: ValidationError) -> JSONResponse:
    """LangServe validates each input of a batch without translating the error: a 422 naming
    the field, as for a single input (``inputs.query``), instead of a 500."""
    where = "inputs" if request.url.path.rstrip("/").endswith("/batch") else "input"
    problems = [
        {"loc": [where, *p["loc"]], "msg": p["msg"], "type": p["type"]} for p in error.errors()
    ]
    return await _invalid(request, RequestValidationError(problems))


def create_app(
    graph: Served | None = None,
    *,
    config: ConfigSource = None,
    path: str = DEFAULT_PATH,
    limits: AdmissionLimits | None = None,
) -> FastAPI:
    """The FastAPI app serving ``graph`` (``build_graphs``' result, whose knob scope the
    requests are checked against, or any compiled graph; default: built from ``config``) at
    ``path``, with bounded concurrency (``studio/admission.py``: beyond the bound, a queue, then
    503)."""
    from langserve import add_routes

    given = graph if graph is not None else build_graphs(config)
    graphs = graphs_of(given)  # None for a bare compiled graph
    scope = graphs.knob_scope if graphs is not None else None
    graph = graph_of(given)
    limits = limits or AdmissionLimits()
    served = ServedGraph(
        bound=graph,
        kwargs={},
        config={"max_concurrency": limits.max_concurrency},  # a batch runs this many at once
        custom_input_type=ServedRequest,
    )
    app = FastAPI(
        title="parallel-rag",
        description="Parallel RAG on LangGraph, served with LangServe",
    )
    with warnings.catch_warnings():
        # LangServe reads the deprecated Pregel.config_schema; the knobs are its configurable
        warnings.simplefilter("ignore")
        add_routes(
            app,
            served,
            path=path,
            enabled_endpoints=list(ENDPOINTS),
            per_req_config_modifier=make_config_guard(scope),
            serializer=graph_serializer(),
        )
    app.add_exception_handler(BlockedError, _blocked)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(ValidationError, _invalid_batch_input)
    app.add_middleware(AdmissionControl, limits=limits)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "graph": graph.get_name(),
            "retrievers": list(scope.retrievers) if scope else [],
        }

    return app


def serve(
    config: ConfigSource = None,
    *,
    base_dir: str | os.PathLike | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = DEFAULT_PATH,
    log_level: str = "info",
    limits: AdmissionLimits | None = None,
) -> None:
    """Build the graph and run the app under uvicorn (blocks until stopped). ``base_dir``:
    where a ``PipelineConfig``'s relative paths start (a file's own folder)."""
    import uvicorn

    graphs = build_graphs(config, base_dir=base_dir)
    graphs.warm_up()  # the model and the stores load now, not in the first requests' timeouts
    app = create_app(graphs, path=path, limits=limits)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
