"""A running server sees what a later ``parallel-rag ingest`` wrote, in every branch, without a
restart: on the shipped defaults (BM25 and Qdrant Edge under ``.parallel-rag/``), a real
``parallel-rag serve`` of a router file (LangServe's ``/rag`` and the router's
``/v1/chat/completions``) and a real ``parallel-rag mcp --http`` with no config at all (the
embedded defaults), both started before a PDF written by fpdf2 is ingested by the CLI in the
same folder. Each surface must return the PDF's chunk, found by both the lexical and the dense
branch, within a few seconds of the ingest's exit.

The router's upstream is a scripted chat server that records what it was sent, so the test
reads the evidence the router injected.

Then requests in flight: both branches of a graph's request are held (a hook around the real
search, once each branch holds its store's revision) while two ingests in another process
publish newer revisions, and a request with a ``prf`` rewriter is held in its rewriting,
before any branch searched; each answers from the revisions live when it started."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from app_servers import running_serve
from document_files import write_pdf
from mcp import Client
from parallel_rag.backends.shared.revisions import current_revision
from parallel_rag.graph.loading import default_config_dict
from scripted_server import CHAT_COMPLETION, ScriptedServer, answer
from servers import BIN, ServerProcess, free_port
from studio_servers import server_env

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
FIRST = ["ada-lovelace.md", "bm25.md", "unix.md"]
PDF_TITLE = "Harbour Lights of Quimperlé"
PDF_PAGES = [
    "Harbour lights of the Breton coast: a short guide for visiting sailors.",
    "The Quimperlé lighthouse keeper polishes the zorblax lantern every Tuesday at dawn; "
    "its lens of cobalt glass throws a blue beam eleven nautical miles out to sea.",
]
QUESTION = "How often does the Quimperlé lighthouse keeper polish the zorblax lantern?"
BRANCHES = {"lexical", "dense"}  # the embedded defaults' retriever names
VISIBLE_WITHIN = 10.0  # seconds from the ingest's exit until every surface answers from it
CALL_SECONDS = 120


def defaults_env() -> dict[str, str]:
    """The servers' environment with no config named: ./parallel-rag.yaml is absent too, so a
    command run with it uses the embedded defaults."""
    env = server_env(Path("unused"))
    env.pop("PARALLEL_RAG_CONFIG")
    return env


def cli(workdir: Path, *args: str) -> None:
    done = subprocess.run(
        [str(BIN / "parallel-rag"), *args],
        cwd=workdir,
        env=defaults_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


def router_file(upstream: str) -> dict:
    """A router file whose pipeline and one route both run the embedded defaults' retrievers."""
    retrievers = default_config_dict()["retrievers"]
    return {
        "retrievers": retrievers,
        "upstream": {"base_url": upstream, "timeouts": {"connect": 5, "read": 30}},
        "routing": {
            "default": "docs",
            "decisions": [
                {
                    "name": "docs",
                    "model": "scripted",
                    "plugins": [
                        {"type": "rag", "configuration": {"retrievers": retrievers, "top_k": 3}}
                    ],
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    """A folder ingested with the defaults, then ``serve`` (router file) and ``mcp --http`` (no
    config) on it, and the scripted upstream: (folder, serve URL, MCP URL, upstream)."""
    workdir = tmp_path_factory.mktemp("ingest-while-serving")
    (workdir / "docs").mkdir()
    for name in FIRST:
        shutil.copy(CORPUS / name, workdir / "docs" / name)
    cli(workdir, "ingest", "--quiet", "docs")
    assert not (workdir / "parallel-rag.yaml").exists()
    with ScriptedServer(answer(200, CHAT_COMPLETION), path="") as upstream:
        config = workdir / "router.yaml"
        config.write_text(yaml.safe_dump(router_file(f"{upstream.url}/v1")), encoding="utf-8")
        port = free_port()
        mcp = ServerProcess(
            [str(BIN / "parallel-rag"), "mcp", "--http", "--port", str(port)],
            env=defaults_env(),
            cwd=workdir,
            log_path=workdir / "mcp.log",
        )
        with mcp, running_serve(config, workdir) as (_, base):
            mcp.wait_for(f"http://127.0.0.1:{port}/healthz")
            yield workdir, base, f"http://127.0.0.1:{port}/mcp", upstream


# -- the three surfaces, each: (the new chunk's id or None, the branches that found it) --------


def branches_of(document: dict) -> set[str]:
    return {source["retriever"] for source in document["sources"]}


def pdf_hit(documents: list[dict]) -> tuple[str | None, set[str]]:
    """The PDF's chunk among fused ``documents`` (id, branches that found it), else None."""
    for document in documents:
        if Path(document["metadata"]["source"]).name == "lights.pdf":
            assert document["metadata"]["page"] == 2, document["metadata"]
            return document["id"], branches_of(document)
    return None, set()


def langserve(base: str) -> tuple[str | None, set[str]]:
    response = httpx.post(
        f"{base}/rag/invoke", json={"input": {"query": QUESTION, "top_k": 3}}, timeout=CALL_SECONDS
    )
    assert response.status_code == 200, response.text
    output = response.json()["output"]
    assert {b["retriever"]: b["status"] for b in output["branches"]} == dict.fromkeys(
        BRANCHES, "ok"
    )
    return pdf_hit(output["documents"])


def mcp_search(url: str) -> tuple[str | None, set[str]]:
    async def call() -> dict:
        async with Client(url, read_timeout_seconds=CALL_SECONDS) as client:
            result = await client.call_tool("search", {"query": QUESTION, "top_k": 3})
            assert not result.is_error, result.content
            return result.structured_content

    return pdf_hit(asyncio.run(call())["documents"])


def chat(base: str, **rag) -> dict:
    body = {"model": "auto", "messages": [{"role": "user", "content": QUESTION}]}
    if rag:
        body["rag"] = rag
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=CALL_SECONDS)
    assert response.status_code == 200, response.text
    return response.json()["parallel_rag"]


def router(base: str, upstream: ScriptedServer) -> tuple[str | None, set[str]]:
    """The router's injected evidence names the PDF's page, and with the route's search
    narrowed to the PDF (a ``title`` filter) each branch that reports hits has found it."""
    report = chat(base)
    sent = json.loads(upstream.bodies[-1])
    evidence = json.dumps(sent["messages"])
    if "lights.pdf p. 2" not in evidence:
        return None, set()
    assert "zorblax lantern every Tuesday" in evidence
    narrowed = chat(base, filters={"title": PDF_TITLE})
    assert narrowed["documents"][0] in report["documents"]
    found = {b["retriever"] for b in narrowed["branches"] if b["status"] == "ok" and b["hits"]}
    return narrowed["documents"][0], found


def test_a_running_server_answers_from_a_new_ingest_in_every_branch(serving, tmp_path):
    workdir, base, mcp_url, upstream = serving
    surfaces = {
        "langserve": lambda: langserve(base),
        "router": lambda: router(base, upstream),
        "mcp": lambda: mcp_search(mcp_url),
    }
    for name, ask in surfaces.items():
        assert ask() == (None, set()), name  # not there before the ingest

    write_pdf(tmp_path / "lights.pdf", PDF_PAGES, title=PDF_TITLE)
    shutil.copy(tmp_path / "lights.pdf", workdir / "docs" / "lights.pdf")
    cli(workdir, "ingest", "--quiet", "docs")
    ingested = time.monotonic()

    seen: dict[str, tuple[str, set[str], float]] = {}
    while len(seen) < len(surfaces) and time.monotonic() - ingested < VISIBLE_WITHIN:
        for name, ask in surfaces.items():
            if name not in seen:
                chunk, branches = ask()
                if chunk is not None and branches == BRANCHES:
                    seen[name] = (chunk, branches, time.monotonic() - ingested)
        time.sleep(0.2)
    assert set(seen) == set(surfaces), (seen, VISIBLE_WITHIN)
    assert len({chunk for chunk, _, _ in seen.values()}) == 1  # the same chunk everywhere
    print({name: round(after, 2) for name, (_, _, after) in seen.items()})
    for log in ("server.log", "mcp.log"):
        assert "Traceback" not in (workdir / log).read_text(encoding="utf-8", errors="replace")


# -- a request in flight ---------------------------------------------------------------------


class Hold:
    """Holds each branch that reaches it until ``release``: a branch arrives once it holds its
    store's revision (BM25: the loaded index; Qdrant Edge: the open revision)."""

    def __init__(self) -> None:
        self.arrived = threading.Semaphore(0)
        self.released = threading.Event()

    def __call__(self) -> None:
        self.arrived.release()
        assert self.released.wait(CALL_SECONDS)

    def wait_for(self, branches: int) -> None:
        for _ in range(branches):
            assert self.arrived.acquire(timeout=CALL_SECONDS), "a branch never started"


class HeldEmbeddings:
    """The real query embeddings, held before embedding (after the search opened its
    revision: ``QdrantEdgeRetriever`` opens it first)."""

    def __init__(self, inner, hold: Hold):
        self.inner, self.hold = inner, hold

    def embed_query(self, text: str) -> list[float]:
        self.hold()
        return self.inner.embed_query(text)


def graph_over_first_files(workdir: Path, **settings):
    """FIRST ingested by the CLI in ``workdir`` with the defaults (plus ``settings``; branch
    timeouts that outlast two ingests on a busy CPU), and a graph built over them."""
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.loading import load_config

    (workdir / "docs").mkdir()
    for name in FIRST:
        shutil.copy(CORPUS / name, workdir / "docs" / name)
    retrievers = [
        {**entry, "timeout_seconds": 600} for entry in default_config_dict()["retrievers"]
    ]
    config_file = workdir / "parallel-rag.yaml"
    config_file.write_text(yaml.safe_dump({"retrievers": retrievers, **settings}), "utf-8")
    cli(workdir, "ingest", "--quiet", "docs")
    config, base_dir = load_config(config_file)
    return build_graph(config, base_dir=base_dir)


def run_held(graph, hold: Hold, workdir: Path, arrivals: int) -> dict:
    """``graph`` asked QUESTION in a thread; once ``arrivals`` holds are reached, the PDF and
    then another file are ingested by the CLI (two revisions published), then the run goes
    on: its result."""
    answers: list[dict] = []
    run = threading.Thread(
        target=lambda: answers.append(graph.invoke({"query": QUESTION, "top_k": 3}))
    )
    run.start()
    try:
        hold.wait_for(arrivals)
        write_pdf(workdir / "docs" / "lights.pdf", PDF_PAGES, title=PDF_TITLE)
        cli(workdir, "ingest", "--quiet", "docs")
        shutil.copy(CORPUS / "eniac.md", workdir / "docs" / "eniac.md")
        cli(workdir, "ingest", "--quiet", "docs")
    finally:
        hold.released.set()
        run.join(CALL_SECONDS)
    (result,) = answers
    return result


def assert_from_before_then_new(held: dict, graph) -> dict:
    """``held`` answered from the first files only, every branch ok; the next run finds the
    PDF in both branches (its result)."""
    assert {b["status"] for b in held["branches"]} == {"ok"}, held["branches"]
    assert {Path(d["metadata"]["source"]).name for d in held["documents"]} <= set(FIRST)
    after = graph.invoke({"query": QUESTION, "top_k": 3})
    chunk, branches = pdf_hit(after["documents"])
    assert chunk is not None and branches == BRANCHES
    return after


def test_a_request_in_flight_answers_from_the_revisions_it_started_with(tmp_path, monkeypatch):
    """Both branches of a request hold their store's revision when two ingests (another
    process) publish newer ones, the first of them dropped from disk by the second: the
    request answers from what it held, whole; the next request from the newest."""
    from parallel_rag.backends.bm25.index import BM25Index
    from parallel_rag.backends.qdrant_edge import retriever as qdrant_edge

    graph = graph_over_first_files(tmp_path)
    store = tmp_path / ".parallel-rag" / "qdrant_edge"
    (collection,) = [p for p in store.iterdir() if p.is_dir()]
    started_with = current_revision(collection)

    hold = Hold()
    search, embeddings = BM25Index.search, qdrant_edge.load_embeddings
    monkeypatch.setattr(BM25Index, "search", lambda *a, **k: (hold(), search(*a, **k))[1])
    monkeypatch.setattr(
        qdrant_edge, "load_embeddings", lambda *a: HeldEmbeddings(embeddings(*a), hold)
    )
    held = run_held(graph, hold, tmp_path, arrivals=len(BRANCHES))
    assert not (collection / started_with).exists()  # two revisions later: gone from disk
    assert {b["retriever"] for b in held["branches"]} == BRANCHES
    after = assert_from_before_then_new(held, graph)
    assert "Tuesday" in after["answer"]


def test_a_run_reads_the_revisions_that_were_live_when_it_started(tmp_path, monkeypatch):
    """A run with a query rewriter (``prf``: it reads the BM25 index before any branch
    starts) is held in its rewriting while two ingests publish: its branches, the dense one
    included, which had not searched yet, answer from the revisions live at the run's start
    (the graph's entry router takes them then: ``backends/shared/revisions.py``), and the next run
    from the new."""
    from parallel_rag.backends.bm25.index import BM25Index

    graph = graph_over_first_files(tmp_path, rewriter={"kind": "prf"})
    hold = Hold()
    query_terms = BM25Index.query_terms
    monkeypatch.setattr(BM25Index, "query_terms", lambda *a: (hold(), query_terms(*a))[1])
    held = run_held(graph, hold, tmp_path, arrivals=1)  # the rewriter, before any branch
    views = sorted((b["retriever"], b["view_kind"]) for b in held["branches"])
    assert len(views) == 3, views  # the question in both branches, its expansion in lexical
    assert_from_before_then_new(held, graph)
