"""The router's routes run their retrieval graph only: the router injects documents and never
generates, so no route compiles an answer graph (no generator is built for it); ``serve
--route`` serves that route's answer graph under LangServe and the route runs the retrieval
graph compiled from the same components."""

from __future__ import annotations

import yaml
from parallel_rag.graph.builder import build_graphs
from parallel_rag.studio.config_resolution import resolve_config
from parallel_rag.studio.router.app import create_router_app
from parallel_rag.studio.router.configuration import parse_router
from parallel_rag.studio.router.runtime import RouterRuntime

RETRIEVERS = [
    {"name": "lexical", "backend": "bm25"},
    {"name": "dense", "backend": "qdrant_edge"},
]
ROUTER = {
    "upstream": {"base_url": "http://127.0.0.1:9/v1"},  # never called here
    "routing": {
        "default": "chat",
        "decisions": [
            {
                "name": "docs",
                "model": "m",
                "plugins": [
                    {
                        "type": "rag",
                        "configuration": {
                            "retrievers": RETRIEVERS,
                            "fusion": {"method": "minmax"},
                            "top_k": 3,
                        },
                    }
                ],
            },
            {"name": "chat", "model": "m"},
        ],
    },
}


def test_a_route_compiles_its_retrieval_graph_only(tmp_path):
    route = RouterRuntime(parse_router(ROUTER), tmp_path).routes["docs"]
    assert "generate" not in route.graph.nodes
    assert set(route.graph.nodes) >= {"retrieve", "fuse"}
    assert route.graph.get_output_jsonschema()["title"] == "RetrievalResult"
    assert RouterRuntime(parse_router(ROUTER), tmp_path).routes["chat"].graph is None


def test_a_route_given_its_answer_graph_runs_the_retrieval_graph_of_the_same_components(
    tmp_path,
):
    config = parse_router(ROUTER)
    answer = build_graphs(config.pipeline_for("docs"), base_dir=tmp_path)
    runtime = RouterRuntime(config, tmp_path, graphs={"docs": answer})
    assert runtime.routes["docs"].graph is answer.retrieval


def test_serve_route_builds_the_route_once_and_its_route_retrieves_only(tmp_path):
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(ROUTER), encoding="utf-8")
    _, runtime = create_router_app(resolve_config(path, route="docs"))
    route = runtime.routes["docs"].graph
    assert "generate" not in route.nodes
    assert route.name == "route:docs-retrieval"  # the served answer graph's own retrieval graph
