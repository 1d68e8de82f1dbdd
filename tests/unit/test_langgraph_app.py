"""``studio/langgraph_app.py`` (what ``langgraph.json`` serves) resolves its configuration as
every command does (``studio/config_resolution.py``), so a router file works there too: it
serves the file's top-level pipeline, else its default retrieving route's."""

from __future__ import annotations

import runpy
from pathlib import Path

import yaml

APP = Path(__file__).resolve().parents[2] / "studio" / "langgraph_app.py"


def served(monkeypatch, config: Path) -> dict:
    """The module's globals, as the LangGraph server loads it (by path) under ``config``."""
    monkeypatch.setenv("PARALLEL_RAG_CONFIG", str(config))
    return runpy.run_path(str(APP))


def test_a_router_file_serves_its_default_routes_pipeline(tmp_path, monkeypatch):
    router = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},  # never called here
        "routing": {
            "default": "docs",
            "decisions": [
                {"name": "chat", "model": "m"},
                {
                    "name": "docs",
                    "model": "m",
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {
                                "retrievers": [{"name": "words", "backend": "bm25"}],
                                "fusion": {"method": "rrf", "k": 30},
                            },
                        }
                    ],
                },
            ],
        },
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(router), encoding="utf-8")
    module = served(monkeypatch, path)
    assert module["graphs"].knob_scope.retrievers == ("words",)
    assert "generate" in module["graph"].nodes
    assert "generate" not in module["retrieval"].nodes


def test_a_pipeline_file_is_served_as_it_is(tmp_path, monkeypatch):
    pipeline = {
        "retrievers": [
            {"name": "first", "backend": "bm25"},
            {"name": "second", "backend": "bm25", "backend_config": {"index_path": "other"}},
        ],
        "fusion": {"method": "rrf"},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipeline), encoding="utf-8")
    module = served(monkeypatch, path)
    assert module["graphs"].knob_scope.retrievers == ("first", "second")
