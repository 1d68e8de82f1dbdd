"""The parallel RAG graphs (retrieval, and retrieval + answer): configuration, state schemas,
per-run context, routing and the builder."""

from parallel_rag.graph.builder import (
    GraphProfile,
    build_graph,
    build_retrieval_graph,
    graph_profile,
)
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
    "build_retrieval_graph",
    "graph_profile",
    "load_config",
]
