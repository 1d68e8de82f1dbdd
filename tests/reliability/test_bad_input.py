"""Bad input at every layer: the library (``build_graph(...).invoke``), the CLI (``main([...])``)
and the LangServe app over HTTP. Each case gets a clear error naming the field or file: a
``ValidationError``/``ConfigError``/``DocumentLoadError`` in the library, a non-zero exit code
and a one-line message (no traceback) from the CLI, a 422 with an OpenAI-style error whose
``param`` names the field on the server. Nothing is partially written.

No case needs a model or an index: requests are refused before anything runs, so the graph is
the embedded defaults over an empty directory. What LangGraph itself does with graph input
before any hook of ours (a key the request does not name is dropped, input that is not a mapping
is refused) is pinned here too.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from langgraph.errors import InvalidUpdateError
from parallel_rag.graph.builder import build_graph, build_graphs
from parallel_rag.graph.configuration import ConfigError
from parallel_rag.graph.loading import load_config
from parallel_rag.graph.state import RAGRequest
from parallel_rag.studio.cli import main
from parallel_rag.studio.documents import DocumentLoadError
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.langserve_app import create_app
from pydantic import ValidationError

pytestmark = pytest.mark.integration

MEGABYTE_QUERY = "why " * 262_144  # 1 MiB
# (request, the field its error must name)
BAD_REQUESTS = [
    ({"query": ""}, "query"),
    ({"query": "   \n\t "}, "query"),
    ({"query": MEGABYTE_QUERY}, "query"),
    ({"query": 42}, "query"),
    ({"query": ["who", "what"]}, "query"),
    ({"top_k": 3}, "query"),
    ({"query": "q", "top_k": "5"}, "top_k"),
    ({"query": "q", "top_k": 2.5}, "top_k"),
    ({"query": "q", "top_k": True}, "top_k"),
    ({"query": "q", "top_k": 0}, "top_k"),
    ({"query": "q", "top_k": -3}, "top_k"),
    ({"query": "q", "top_k": 10**12}, "top_k"),
    ({"query": "q", "filters": "tenant=acme"}, "filters"),
    ({"query": "q", "filters": ["tenant", "acme"]}, "filters"),
    ({"query": "q", "filters": {"tenant": {"$ne": "acme"}}}, "filters.tenant"),
    ({"query": "q", "filters": {"tenant": ["acme", "globex"]}}, "filters.tenant"),
    ({"query": "q", "filters": {"tenant": None}}, "filters.tenant"),
    ({"query": "q", "tenant": 7}, "tenant"),
    ({"query": "q", "tenant": ""}, "tenant"),
]
IDS = [f"{field}-{i}" for i, (_, field) in enumerate(BAD_REQUESTS)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bad-input")


@pytest.fixture(scope="module")
def graphs(workdir):
    return build_graphs(None, base_dir=workdir)


@pytest.fixture(scope="module")
def graph(graphs):
    return graphs.graph


@pytest.fixture
def in_workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARALLEL_RAG_CONFIG", raising=False)
    return tmp_path


def error_fields(error: ValidationError) -> list[str]:
    return [".".join(str(p) for p in problem["loc"]) for problem in error.errors()]


# ------------------------------------------------------------------------------- library


@pytest.mark.parametrize(("request_", "field"), BAD_REQUESTS, ids=IDS)
def test_library_refuses_bad_requests_naming_the_field(graph, request_, field):
    with pytest.raises(ValidationError) as raised:
        graph.invoke(request_)
    assert any(f == field or f.startswith(field + ".") for f in error_fields(raised.value)), (
        error_fields(raised.value)
    )
    assert field.split(".")[0] in str(raised.value)


@pytest.mark.parametrize("value", [42, ["q"], 3.5, b"bytes", "a bare question"])
def test_library_refuses_input_that_is_not_a_request(graph, value):
    """LangGraph refuses graph input that is not a mapping before any hook of ours runs (the
    graph is StateGraph.compile()'s own result: no replaced START node turns a bare question
    into a request); the error says what it got."""
    with pytest.raises(InvalidUpdateError, match="Expected dict"):
        graph.invoke(value)


@pytest.mark.parametrize("extra", [{"bogus": 1}, {"callbacks": {"api_key": "x"}}])
def test_a_key_the_request_does_not_name_reaches_nothing(graph, extra):
    """LangGraph drops it as it writes the input into the state (as in any LangGraph graph);
    ``RAGRequest``, which the servers and the CLI check raw requests against, refuses it."""
    result = graph.invoke({"query": "What is BM25?", **extra})
    assert result["answer"] and not set(extra) & set(result)
    with pytest.raises(ValidationError, match=next(iter(extra))):
        RAGRequest.model_validate({"query": "q", **extra})


async def test_library_async_and_batch_refuse_too(graph):
    with pytest.raises(ValidationError, match="query"):
        await graph.ainvoke({"query": " "})
    with pytest.raises(ValidationError, match="top_k"):
        graph.batch([{"query": "fine"}, {"query": "q", "top_k": 0}])


# ------------------------------------------------------------------------------- CLI


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse refusing an option
        code = exit_.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["ask", ""], "query"),
        (["ask", "  \t "], "query"),
        (["ask", MEGABYTE_QUERY], "query"),
        (["ask", "q", "--top-k", "0"], "top_k"),
        (["ask", "q", "--top-k", "-1"], "top_k"),
        (["ask", "q", "--top-k", "1000000000"], "top_k"),
        (["ask", "q", "--tenant", ""], "tenant"),
    ],
    ids=["empty", "whitespace", "1MB", "top_k-0", "top_k-negative", "top_k-huge", "tenant"],
)
def test_cli_refuses_bad_requests_before_loading_anything(capsys, in_workdir, argv, field):
    code, err = run_cli(capsys, *argv)
    assert code == 2
    assert f"invalid request: {field}:" in err
    assert len(err) < 2000  # the 1 MB query is not echoed back
    assert not (in_workdir / ".parallel-rag").exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["ask", "q", "--top-k", "many"], "argument --top-k: invalid int value: 'many'"),
        (["ask", "q", "--top-k", "2.5"], "argument --top-k: invalid int value: '2.5'"),
        (["ask", "q", "--bogus", "1"], "unrecognized arguments: --bogus"),
        (["ask"], "the following arguments are required: question"),
        (["serve", "--max-concurrency", "x"], "argument --max-concurrency: invalid int value"),
    ],
)
def test_cli_refuses_wrong_types_and_unknown_options(capsys, in_workdir, argv, expected):
    code, err = run_cli(capsys, *argv)
    assert code == 2 and expected in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["ask", "q", "--filter", "tenant"], "--filter: expected KEY=VALUE, got 'tenant'"),
        (["ask", "q", "--filter", "=acme"], "--filter: expected KEY=VALUE, got '=acme'"),
        (["ingest", ".", "--metadata", "tenant"], "--metadata: expected KEY=VALUE"),
        (["serve", "--max-concurrency", "0"], "max_concurrency: must be at least 1"),
        (["serve", "--max-queue", "-1"], "max_queue: must be 0 or more"),
    ],
)
def test_cli_refuses_malformed_options_naming_them(capsys, in_workdir, argv, expected):
    code, err = run_cli(capsys, *argv)
    assert code == 1 and expected in err


# ------------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def app(graphs):
    return create_app(graphs)


async def post(app, path: str, **kwargs) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await client.post(path, timeout=60, **kwargs)


def assert_422_naming(response: httpx.Response, param: str) -> None:
    assert response.status_code == 422, response.text[:500]
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_input"
    assert error["param"] == param or error["param"].startswith(param + "."), error
    assert param.split(".")[-1] in error["message"]
    assert len(response.content) < 10_000  # a 1 MB input is not echoed in full


@pytest.mark.parametrize(("request_", "field"), BAD_REQUESTS, ids=IDS)
async def test_http_invoke_answers_422_naming_the_field(app, request_, field):
    response = await post(app, "/rag/invoke", json={"input": request_})
    assert_422_naming(response, f"input.{field}")


@pytest.mark.parametrize("endpoint", ["stream", "stream_events", "stream_log"])
async def test_http_streaming_endpoints_answer_422_too(app, endpoint):
    response = await post(app, f"/rag/{endpoint}", json={"input": {"query": "q", "top_k": 0}})
    assert_422_naming(response, "input.top_k")


async def test_http_batch_with_one_bad_input_answers_422_not_500(app):
    body = {"inputs": [{"query": "fine"}, {"query": "   "}]}
    assert_422_naming(await post(app, "/rag/batch", json=body), "inputs.query")
    body = {"inputs": [{"query": "fine", "filters": {"a": {"b": 1}}}]}
    assert_422_naming(await post(app, "/rag/batch", json=body), "inputs.filters.a")


async def test_http_malformed_bodies(app):
    response = await post(
        app, "/rag/invoke", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422 and "Invalid JSON" in response.json()["error"]["message"]
    response = await post(app, "/rag/invoke", json={"input": 42})
    assert response.status_code == 422 and "valid dictionary" in response.json()["error"]["message"]
    response = await post(app, "/rag/invoke", json={"query": "no input wrapper"})
    assert response.status_code == 422


async def test_http_body_over_the_cap_is_413_before_it_is_read(app):
    big = json.dumps({"input": {"query": "x" * (5 * 1024 * 1024)}}).encode()
    response = await post(
        app, "/rag/invoke", content=big, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


# ------------------------------------------------------------------------------- ingest


def two_bm25_config(path: Path) -> Path:
    """A model-free config: two BM25 indexes (ingest writes both)."""
    config = {
        "retrievers": [
            {"name": "a", "backend": "bm25", "backend_config": {"index_path": "idx/a"}},
            {"name": "b", "backend": "bm25", "backend_config": {"index_path": "idx/b"}},
        ]
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def snapshot(directory: Path) -> dict[str, bytes]:
    if not directory.exists():
        return {}
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.fixture
def docs_with_bad_utf8(tmp_path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a-good.md").write_text("# Good\nPlain, valid text about bridges.\n", encoding="utf-8")
    bad = docs / "b-bad.txt"
    bad.write_bytes(b"Valid start, then a stray byte \xff\xfe and more text.\n")
    (docs / "c-good.md").write_text("# Also good\nText about comets.\n", encoding="utf-8")
    return docs, bad


def test_library_ingest_of_invalid_utf8_names_the_file_and_writes_nothing(
    tmp_path, docs_with_bad_utf8
):
    docs, bad = docs_with_bad_utf8
    config, base_dir = load_config(two_bm25_config(tmp_path / "parallel-rag.yaml"))
    ingest_paths([docs / "a-good.md"], config, base_dir, progress=False)  # an index exists
    before = snapshot(tmp_path / "idx")
    assert before
    with pytest.raises(DocumentLoadError) as raised:
        ingest_paths([docs], config, base_dir, progress=False)
    assert str(bad) in str(raised.value) and "not valid UTF-8" in str(raised.value)
    assert "byte 31" in str(raised.value) and "nothing was ingested" in str(raised.value)
    assert snapshot(tmp_path / "idx") == before


def test_cli_ingest_of_invalid_utf8_names_the_file_and_writes_nothing(
    capsys, tmp_path, docs_with_bad_utf8, monkeypatch
):
    docs, bad = docs_with_bad_utf8
    monkeypatch.chdir(tmp_path)
    config = two_bm25_config(tmp_path / "parallel-rag.yaml")
    code, err = run_cli(capsys, "--config", str(config), "ingest", str(docs), "--quiet")
    assert code == 1 and str(bad) in err and "not valid UTF-8" in err
    assert not (tmp_path / "idx").exists()


# ------------------------------------------------------------------------------- config

GOOD_RETRIEVERS = [
    {"name": "lexical", "backend": "bm25"},
    {"name": "dense", "backend": "qdrant"},
]
BAD_CONFIGS = {
    "typo": ({"retreivers": GOOD_RETRIEVERS}, "retreivers: Extra inputs are not permitted"),
    "typo-nested": (
        {"retrievers": [GOOD_RETRIEVERS[0], {"name": "dense", "backend": "qdrant", "top-k": 5}]},
        "retrievers.1.top-k: Extra inputs are not permitted",
    ),
    "wrong-type": (
        {"retrievers": [GOOD_RETRIEVERS[0], {**GOOD_RETRIEVERS[1], "top_k": "many"}]},
        "retrievers.1.top_k: Input should be a valid integer",
    ),
    "wrong-type-section": (
        {"retrievers": GOOD_RETRIEVERS, "fusion": "rrf"},
        "fusion: Input should be a valid dictionary",
    ),
    "unknown-backend": (
        {"retrievers": [GOOD_RETRIEVERS[0], {"name": "es", "backend": "elastic"}]},
        "retrievers.1: Input tag 'elastic' found using 'backend' does not match",
    ),
    "not-a-mapping": (["retrievers"], "the configuration must be a mapping"),
}


@pytest.fixture(params=sorted(BAD_CONFIGS))
def bad_config(request, tmp_path) -> tuple[Path, str]:
    data, expected = BAD_CONFIGS[request.param]
    path = tmp_path / f"{request.param}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path, expected


def test_library_refuses_bad_config_naming_file_and_field(bad_config):
    path, expected = bad_config
    with pytest.raises(ConfigError) as raised:
        build_graph(path)
    assert str(path) in str(raised.value) and expected in str(raised.value)


def test_library_refuses_a_missing_or_unparsable_config_file(tmp_path, monkeypatch):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=f"config file not found: {missing}"):
        build_graph(missing)
    monkeypatch.setenv("PARALLEL_RAG_CONFIG", str(missing))  # how langgraph dev is pointed
    with pytest.raises(ConfigError, match="config file not found"):
        build_graph()
    broken = tmp_path / "broken.yaml"
    broken.write_text("retrievers: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{broken}: not valid YAML"):
        build_graph(broken)


@pytest.mark.parametrize("command", [["ask", "q"], ["ingest", "."], ["serve", "--port", "1"]])
def test_cli_refuses_bad_config_for_every_command(
    capsys, tmp_path, monkeypatch, bad_config, command
):
    path, expected = bad_config
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(capsys, "--config", str(path), *command)
    assert code == 1 and str(path) in err and expected in err
    assert not (tmp_path / ".parallel-rag").exists()


def test_cli_and_server_refuse_a_missing_config_file(capsys, tmp_path):
    missing = tmp_path / "missing.yaml"
    for command in (["ask", "q"], ["ingest", str(tmp_path)], ["serve"]):
        code, err = run_cli(capsys, "--config", str(missing), *command)
        assert code == 1 and f"config file not found: {missing}" in err
    with pytest.raises(ConfigError, match="config file not found"):
        create_app(config=missing)


def test_server_app_refuses_bad_config_before_serving(bad_config):
    path, expected = bad_config
    with pytest.raises(ConfigError) as raised:
        create_app(config=path)
    assert expected in str(raised.value)
