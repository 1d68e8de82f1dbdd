"""A configuration or command that needs an extra which is not installed is refused at load
with one line naming the extra (issue 51), and building the default graph imports none of the
packages the extras bring.

"Not installed" is made real for one test at a time: ``sys.modules[name] = None`` is how Python
marks a module that cannot be imported (``importlib.util.find_spec`` then answers None and
``import`` raises), so the check under test runs exactly as on a machine without the extra.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from parallel_rag.backends.extras import EXTRAS, MissingExtraError, installed, require_extra
from parallel_rag.backends.registry import BACKENDS
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.chat_models import ChatModelSettings, make_chat_model

BM25 = {"name": "lexical", "backend": "bm25"}
SETTINGS = {"qdrant": {}, "milvus": {"uri": "milvus.db", "collection": "docs"}}


def hide(monkeypatch, *modules: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def refusal(config: dict) -> str:
    with pytest.raises(ValueError) as caught:
        parse_config(config)
    return str(caught.value)


def test_every_backend_outside_the_core_names_an_extra_that_exists():
    declared = {name: spec.extra for name, spec in BACKENDS.items() if spec.extra}
    assert declared == {"qdrant": "qdrant", "milvus": "milvus", "mcp": "mcp"}
    assert set(declared.values()) <= set(EXTRAS)


@pytest.mark.parametrize(
    ("backend", "module", "extra"),
    [("qdrant", "qdrant_client", "qdrant"), ("milvus", "pymilvus", "milvus")],
)
def test_a_backend_without_its_extra_is_refused_at_load(monkeypatch, backend, module, extra):
    hide(monkeypatch, module)
    dense = {"name": "dense", "backend": backend, "backend_config": SETTINGS[backend]}
    message = refusal({"retrievers": [BM25, dense]})
    (line,) = [line for line in message.splitlines() if "extra" in line]  # one line says it
    assert line.strip() == (
        f"retrievers.dense.backend: backend '{backend}' needs the '{extra}' extra: "
        f"pip install 'parallel-rag[{extra}]'"
    )


def test_the_same_backend_loads_when_its_extra_is_installed():
    assert installed("qdrant")
    config = parse_config({"retrievers": [BM25, {"name": "dense", "backend": "qdrant"}]})
    assert isinstance(config, PipelineConfig)


def test_a_hybrid_leg_is_checked_too(monkeypatch):
    hide(monkeypatch, "qdrant_client")
    hybrid = {
        "name": "kb",
        "backend": "hybrid",
        "backend_config": {
            "strategy": "sequential",
            "primary": {"name": "p", "backend": "qdrant"},
            "fallback": {"name": "f", "backend": "bm25"},
        },
    }
    assert "parallel-rag[qdrant]" in refusal({"retrievers": [BM25, hybrid]})


@pytest.mark.parametrize(
    ("part", "module", "extra", "field"),
    [
        ({"embeddings": {"model": "/models/e5"}}, "torch", "torch", "embeddings.model"),
        (
            {"reranker": {"kind": "cross_encoder", "model": "/models/ce"}},
            "sentence_transformers",
            "torch",
            "reranker.model",
        ),
        (
            {"generator": {"kind": "llm", "llm": {"model": "m", "base_url": "http://x/v1"}}},
            "langchain_openai",
            "openai",
            "generator.llm",
        ),
        (
            {"generator": {"kind": "llm", "llm": {"model": "anthropic:claude"}}},
            "langchain",
            "providers",
            "generator.llm",
        ),
    ],
)
def test_models_without_their_extra_are_refused_at_load(monkeypatch, part, module, extra, field):
    hide(monkeypatch, module)
    message = refusal({"retrievers": [BM25, {"name": "b", "backend": "bm25"}], **part})
    assert field in message and f"pip install 'parallel-rag[{extra}]'" in message


def test_a_chat_model_built_in_code_names_the_extra(monkeypatch):
    from parallel_rag.nodes.chat_models import compatible_chat_openai_class

    compatible_chat_openai_class.cache_clear()  # another test in this process may have built it
    hide(monkeypatch, "langchain_openai")
    with pytest.raises(MissingExtraError, match=r"parallel-rag\[openai\]"):
        make_chat_model(ChatModelSettings(model="m", base_url="http://127.0.0.1:9/v1"))


def test_missing_extra_is_an_import_error_and_a_value_error(monkeypatch):
    hide(monkeypatch, "ir_measures")
    with pytest.raises(ImportError):
        require_extra("eval", "parallel-rag eval")
    with pytest.raises(ValueError, match=r"^parallel-rag eval needs the 'eval' extra"):
        require_extra("eval", "parallel-rag eval")


def test_building_the_default_graph_imports_no_extra(tmp_path):
    """In a fresh interpreter (nothing imported yet by other tests)."""
    code = (
        "import sys\n"
        "from parallel_rag.graph import build_graph\n"
        "build_graph()\n"
        "from parallel_rag.backends.extras import EXTRAS\n"
        "mods = {m for ms in EXTRAS.values() for m in ms} | {'transformers', 'onnx'}\n"
        "print(sorted(m for m in mods if m in sys.modules))\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert answer.stdout.strip() == "[]"


def test_cli_serve_without_the_servers_extra_says_which(monkeypatch, capsys):
    from parallel_rag.studio import cli

    hide(monkeypatch, "fastapi")
    assert cli.main(["serve", "--port", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "parallel-rag: parallel-rag serve needs the 'servers' extra: "
        "pip install 'parallel-rag[servers]'"
    )
