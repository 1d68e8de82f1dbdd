"""The parallel RAG graph: configuration, state schemas, routing and the builder."""

from parallel_rag.graph.builder import RAGGraph, build_graph
from parallel_rag.graph.configuration import ConfigError, PipelineConfig, load_config
from parallel_rag.graph.state import RAGRequest, RAGResult

__all__ = [
    "ConfigError",
    "PipelineConfig",
    "RAGGraph",
    "RAGRequest",
    "RAGResult",
    "build_graph",
    "load_config",
]
