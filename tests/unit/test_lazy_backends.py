"""Lazy backends (issue 51): importing ``build_graph`` loads every backend's settings and no
backend's retriever module or client library, and building a graph loads those of the backends
its configuration uses, no others. Each case runs in a fresh interpreter (a subprocess): this
process has imported everything the other tests needed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from parallel_rag.backends.registry import BACKENDS, MODULES

CLIENTS = {
    "bm25": ("bm25s", "rank_bm25"),
    "qdrant": ("qdrant_client", "langchain_qdrant"),
    "qdrant_edge": ("qdrant_edge",),
    "milvus": ("pymilvus", "langchain_milvus"),
    "mcp": ("mcp",),
}
"""The libraries a backend's retriever module brings that nothing else in the graph imports."""

RETRIEVER_MODULES = {
    __import__(f"parallel_rag.backends.{module}", fromlist=["BACKEND"]).BACKEND.name: (
        f"parallel_rag.backends.{module}.retriever"
    )
    for module in MODULES
}

PROBE = """
import json, sys
from parallel_rag.graph import build_graph
config = json.loads(sys.argv[1])
if config == "defaults":
    build_graph()
elif config is not None:
    build_graph(config)
print(json.dumps(sorted(sys.modules)))
"""

ELASTICSEARCH = {
    "name": "es",
    "backend": "external_api",
    "backend_config": {
        "endpoint": "http://127.0.0.1:9/i/_search",
        "request_format": "elasticsearch",
    },
}


def loaded_modules(config: dict | str | None, cwd) -> set[str]:
    """``sys.modules`` of a fresh interpreter after importing ``build_graph`` (and building
    ``config`` when given; ``"defaults"``: the embedded defaults)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(config)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def backend_modules(backends: set[str]) -> set[str]:
    """The retriever modules and client libraries of ``backends``."""
    found = {RETRIEVER_MODULES[name] for name in backends}
    return found | {client for name in backends for client in CLIENTS.get(name, ())}


def test_every_backend_is_covered():
    assert set(RETRIEVER_MODULES) == set(BACKENDS)
    assert set(CLIENTS) <= set(BACKENDS)


def test_importing_build_graph_loads_no_retriever_module_and_no_client_library(tmp_path):
    loaded = loaded_modules(None, tmp_path)
    assert sorted(backend_modules(set(BACKENDS)) & loaded) == []
    assert sorted({"numpy", "scipy", "yaml"} & loaded) == []  # they load with what uses them
    settings = {f"parallel_rag.backends.{module}.settings" for module in MODULES} - {
        "parallel_rag.backends.hybrid.settings"  # imported like the others, checked below
    }
    assert settings <= loaded  # the configuration schema holds every backend's settings
    assert "parallel_rag.backends.hybrid.settings" in loaded


@pytest.mark.parametrize(
    ("retrievers", "used"),
    [
        ("defaults", {"bm25", "qdrant_edge"}),
        ([{"name": "lexical", "backend": "bm25"}, ELASTICSEARCH], {"bm25", "external_api"}),
        (
            [
                ELASTICSEARCH,
                {"name": "kb", "backend": "hybrid", "backend_config": {"primary": ELASTICSEARCH}},
            ],
            {"external_api", "hybrid"},
        ),
    ],
    ids=["defaults", "bm25+external_api", "external_api+hybrid"],
)
def test_building_a_graph_loads_only_the_backends_its_configuration_uses(
    retrievers, used, tmp_path
):
    config = retrievers if isinstance(retrievers, str) else {"retrievers": retrievers}
    loaded = loaded_modules(config, tmp_path)
    unused = set(BACKENDS) - used
    assert sorted(backend_modules(unused) & loaded) == []
    assert {RETRIEVER_MODULES[name] for name in used} <= loaded


def test_the_analyzer_stopwords_are_bm25s_list():
    """``bm25.analysis`` writes out bm25s's English stopwords rather than importing bm25s (and
    with it numpy and scipy) for a list of 33 words; the two stay equal."""
    import bm25s.stopwords
    from parallel_rag.backends.bm25.analysis import ENGLISH_STOPWORDS

    assert frozenset(bm25s.stopwords.STOPWORDS_EN) == ENGLISH_STOPWORDS


def test_the_generators_function_words_are_bm25s_nltk_list():
    import bm25s.stopwords
    from parallel_rag.nodes.generate.function_words import FUNCTION_WORDS

    assert frozenset(bm25s.stopwords.STOPWORDS_EN_PLUS) == FUNCTION_WORDS
