"""The one config resolver every command uses (studio/config_resolution.py): a plain file, the
embedded defaults, and a router file, whose pipeline is the ``--route`` one, else the
top-level one, else the default route's, else the first retrieving route's. Offline: nothing
is built or opened."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from parallel_rag.graph.configuration import ConfigError
from parallel_rag.studio.cli.parser import build_parser
from parallel_rag.studio.config_resolution import resolve_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "router.yaml"
PIPELINE = [{"name": "lexical", "backend": "bm25"}, {"name": "dense", "backend": "qdrant_edge"}]


def router_file(tmp_path: Path, *, top_level: bool, default: str | None = "chat") -> Path:
    rag = {"type": "rag", "configuration": {"backend": "bm25", "top_k": 3}}
    data: dict = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "routing": {
            "decisions": [
                {"name": "chat", "model": "m"},
                {"name": "notes", "model": "m", "plugins": [rag]},
            ]
        },
    }
    if default is not None:
        data["routing"]["default"] = default
    if top_level:
        data["retrievers"] = PIPELINE
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_plain_file_is_its_pipeline(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({"retrievers": PIPELINE}), encoding="utf-8")
    resolved = resolve_config(path)
    assert [e.name for e in resolved.runnable().retrievers] == ["lexical", "dense"]
    assert (resolved.router, resolved.route, resolved.base_dir) == (None, None, tmp_path)


def test_no_file_is_the_embedded_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARALLEL_RAG_CONFIG", raising=False)
    resolved = resolve_config()
    assert [e.backend for e in resolved.runnable().retrievers] == ["bm25", "qdrant_edge"]
    assert resolved.router is None


def test_a_router_file_runs_its_top_level_pipeline(tmp_path, monkeypatch):
    path = router_file(tmp_path, top_level=True)
    monkeypatch.setenv("PARALLEL_RAG_CONFIG", str(path))  # found the way every command finds it
    resolved = resolve_config()
    assert resolved.router is not None and resolved.route is None
    assert [e.name for e in resolved.runnable().retrievers] == ["lexical", "dense"]
    assert resolved.base_dir == tmp_path


def test_route_names_the_routes_pipeline(tmp_path):
    resolved = resolve_config(router_file(tmp_path, top_level=True), route="notes")
    assert resolved.route == "notes"
    assert [e.backend for e in resolved.runnable().retrievers] == ["bm25"]


def test_without_a_top_level_pipeline_the_default_or_first_retrieving_route(tmp_path):
    # the default (chat) retrieves nothing: the first route that retrieves
    assert resolve_config(router_file(tmp_path, top_level=False)).route == "notes"
    assert resolve_config(router_file(tmp_path, top_level=False, default="notes")).route == "notes"


def test_a_router_file_without_retrieval_has_nothing_to_run(tmp_path):
    path = tmp_path / "chat-only.yaml"
    data = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "routing": {"decisions": [{"name": "chat", "model": "m"}]},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    resolved = resolve_config(path)  # serve can still serve its routes
    assert resolved.pipeline is None and resolved.router is not None
    with pytest.raises(ConfigError, match="no top-level pipeline"):
        resolved.runnable()


@pytest.mark.parametrize(
    ("route", "problem"),
    [("nowhere", "is not a route"), ("chat", "retrieves nothing")],
)
def test_a_bad_route_is_refused_with_the_reason(tmp_path, route, problem):
    with pytest.raises(ConfigError) as caught:
        resolve_config(router_file(tmp_path, top_level=True), route=route)
    assert str(caught.value).startswith("--route:") and problem in str(caught.value)


def test_route_on_a_file_without_routes_is_refused(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({"retrievers": PIPELINE}), encoding="utf-8")
    with pytest.raises(ConfigError, match="--route: .* has no routing section"):
        resolve_config(path, route="docs")


def test_the_example_router_file_runs_the_shipped_defaults():
    """examples/router.yaml: BM25 + Qdrant Edge fused by min-max, on top and in its docs route."""
    for route in (None, "docs"):
        pipeline = resolve_config(EXAMPLE, route=route).runnable()
        assert [e.backend for e in pipeline.retrievers] == ["bm25", "qdrant_edge"]
        assert pipeline.fusion.method == "minmax" and pipeline.fusion.dense_weight == 0.75
    single = resolve_config(EXAMPLE, route="edge-docs").runnable()
    assert [e.backend for e in single.retrievers] == ["qdrant_edge"]


@pytest.mark.parametrize("command", ["ingest x", "ask q", "serve", "eval d", "mcp"])
def test_every_command_that_runs_a_pipeline_takes_route(command):
    name, *rest = command.split()
    args = build_parser().parse_args(["--config", "r.yaml", name, "--route", "docs", *rest])
    assert args.route == "docs"
