"""The parallel RAG graph: configuration, state schemas, routing and the builder."""

from parallel_rag.graph.builder import GraphProfile, build_graph, graph_profile
from parallel_rag.graph.configuration import ConfigError, PipelineConfig
from parallel_rag.graph.loading import load_config
from parallel_rag.graph.state import RAGRequest, RAGResult

__all__ = [
    "ConfigError",
    "GraphProfile",
    "PipelineConfig",
    "RAGRequest",
    "RAGResult",
    "build_graph",
    "graph_profile",
    "load_config",
]
