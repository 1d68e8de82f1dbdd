"""A long-running reader of the BM25 index (a compiled graph, a router route with its context
cache) answers from what a later ingest wrote, without a restart or ``reload()``: an ingest in
the same process (``studio.ingestion.ingest_paths``), a real ``parallel-rag ingest`` in another
process, and queries that keep running while that process swaps the index in.

The pipeline is two BM25 retrievers (engines ``bm25s`` and ``rank_bm25``, each with its own
index) and a lexical-only extractive generator, so nothing is embedded."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from parallel_rag.backends.bm25.retriever import BM25Retriever
from parallel_rag.backends.bm25.storage import index_stamp
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.components import make_retriever
from parallel_rag.graph.loading import load_config
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.router.configuration import parse_router
from parallel_rag.studio.router.retrieval import retrieve as route_context
from parallel_rag.studio.router.runtime import RouterRuntime

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
FIRST = [CORPUS / "bm25.md", CORPUS / "unix.md", CORPUS / "golden-gate-bridge.md"]
LATER = CORPUS / "millau-viaduct.md"
QUESTION = "Who designed the Millau Viaduct?"
RETRIEVERS = [
    {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "idx/bm25"}},
    {
        "name": "lexical-rank",
        "backend": "bm25",
        "backend_config": {"index_path": "idx/bm25-rank", "engine": "rank_bm25"},
    },
]
PIPELINE = {
    "retrievers": RETRIEVERS,
    "generator": {"min_similarity": None, "sentence_vectors": None},
}
WAIT = 300  # seconds a subprocess or thread may take before the test fails


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A config file and the first files ingested next to it."""
    (tmp_path / "parallel-rag.yaml").write_text(yaml.safe_dump(PIPELINE), encoding="utf-8")
    config, base_dir = load_config(tmp_path / "parallel-rag.yaml")
    ingest_paths(FIRST, config, base_dir, progress=False)
    return tmp_path


def sources(documents) -> set[str]:
    return {Path(d["metadata"]["source"]).name for d in documents}


def top_source(documents) -> str:
    return Path(documents[0]["metadata"]["source"]).name


def cli_ingest(workspace: Path, *files: Path) -> subprocess.Popen:
    """A real ``parallel-rag ingest`` in another process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    cli = [sys.executable, "-m", "parallel_rag.studio.cli"]
    config = str(workspace / "parallel-rag.yaml")
    return subprocess.Popen(
        [*cli, "--config", config, "ingest", "--quiet", *map(str, files)],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen) -> None:
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 0, (out, err)


def test_a_graph_built_before_an_ingest_answers_from_it_without_reload(workspace):
    config, base_dir = load_config(workspace / "parallel-rag.yaml")
    graph = build_graph(config, base_dir=base_dir)
    retrievers = [make_retriever(entry, config, base_dir) for entry in config.retrievers]
    before = graph.invoke({"query": QUESTION, "top_k": 3})
    assert LATER.name not in sources(before["documents"])
    for retriever in retrievers:
        assert LATER.name not in {
            Path(d.metadata["source"]).name for d in retriever.invoke(QUESTION)
        }

    ingest_paths([LATER], config, base_dir, progress=False)

    after = graph.invoke({"query": QUESTION, "top_k": 3})
    assert top_source(after["documents"]) == LATER.name
    assert {b["status"] for b in after["branches"]} == {"ok"}
    assert "Millau Viaduct" in after["answer"]
    for retriever in retrievers:  # both engines
        top = retriever.invoke(QUESTION, k=1)
        assert Path(top[0].metadata["source"]).name == LATER.name
        assert {Path(c.metadata["source"]).name for c in retriever.get_index().chunks} == {
            p.name for p in [*FIRST, LATER]
        }


def test_an_ingest_by_another_process_is_picked_up(workspace):
    config, base_dir = load_config(workspace / "parallel-rag.yaml")
    graph = build_graph(config, base_dir=base_dir)
    assert LATER.name not in sources(graph.invoke({"query": QUESTION})["documents"])
    finished(cli_ingest(workspace, LATER))
    assert top_source(graph.invoke({"query": QUESTION, "top_k": 3})["documents"]) == LATER.name


def test_queries_while_another_process_ingests_never_fail(workspace):
    """Threads ask without pause while a ``parallel-rag ingest`` subprocess rewrites both
    indexes; every answer comes from one whole save, and once it exits the new files answer."""
    config, base_dir = load_config(workspace / "parallel-rag.yaml")
    entry = config.retrievers[0]
    retriever = make_retriever(entry, config, base_dir)
    assert isinstance(retriever, BM25Retriever)
    graph = build_graph(config, base_dir=base_dir)
    retriever.invoke(QUESTION)
    stamp = index_stamp(retriever.index_path)
    first_ids = {c.id for c in retriever.get_index().chunks}
    everything = sorted(CORPUS.glob("*.md"))
    done = threading.Event()
    errors: list[BaseException] = []
    asked = [0]

    def ask() -> None:
        while not done.is_set():
            try:
                chunk_ids = {c.id for c in retriever.get_index().chunks}
                assert first_ids <= chunk_ids  # an ingest only adds files here: never a mix
                retriever.invoke(QUESTION)
                result = graph.invoke({"query": QUESTION, "top_k": 3})
                assert {b["status"] for b in result["branches"]} == {"ok"}, result["branches"]
                asked[0] += 1
            except BaseException as error:  # noqa: BLE001 - collected and asserted below
                errors.append(error)
                return

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        finished(cli_ingest(workspace, *everything))
    finally:
        done.set()
        for thread in threads:
            thread.join(WAIT)
    assert not errors, errors
    assert asked[0] > 0
    assert index_stamp(retriever.index_path) != stamp
    assert top_source(graph.invoke({"query": QUESTION, "top_k": 3})["documents"]) == LATER.name
    assert len(retriever.get_index()) > len(first_ids)


def test_the_router_context_cache_is_emptied_and_refilled_from_the_new_index(workspace):
    """A question cached before an ingest is retrieved again after it, from the new index:
    the route's cache key includes the index files' fingerprint, and the retriever answering
    the miss has loaded the new save."""
    router = parse_router(
        {
            "upstream": {"base_url": "http://127.0.0.1:9/v1"},
            "routing": {
                "default": "docs",
                "decisions": [
                    {
                        "name": "docs",
                        "model": "m",
                        "plugins": [
                            {
                                "type": "rag",
                                "configuration": {"retrievers": RETRIEVERS, "top_k": 3},
                            }
                        ],
                    }
                ],
            },
        }
    )
    runtime = RouterRuntime(router, workspace)
    route = runtime.routes["docs"]

    def retrieve():
        return asyncio.run(route_context(route, QUESTION, None))

    first, again = retrieve(), retrieve()
    assert (first.cache, again.cache) == ("miss", "hit")
    assert LATER.name not in sources(first.documents)

    finished(cli_ingest(workspace, LATER))

    after, after_again = retrieve(), retrieve()
    assert (after.cache, after_again.cache) == ("miss", "hit")
    assert route.cache.stats.invalidations == 1
    assert top_source(after.documents) == LATER.name
    assert after_again.documents == after.documents
