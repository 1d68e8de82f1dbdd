"""The parallel RAG graphs (retrieval, and retrieval + answer): configuration, state schemas,
per-run context, routing and the builder."""

from parallel_rag.graph.builder import (
    RAGGraphs,
    build_graph,
    build_graphs,
    build_retrieval_graph,
)
from parallel_rag.graph.configuration import ConfigError, PipelineConfig
from parallel_rag.graph.loading import load_config
from parallel_rag.graph.state import RAGRequest, RAGResult

__all__ = [
    "ConfigError",
    "PipelineConfig",
    "RAGGraphs",
    "RAGRequest",
    "RAGResult",
    "build_graph",
    "build_graphs",
    "build_retrieval_graph",
    "load_config",
]
