"""The graph ``langgraph.json`` serves (LangGraph Studio / ``langgraph dev``).

Built from ``$PARALLEL_RAG_CONFIG`` or ./parallel-rag.yaml, else the embedded defaults. It has
no checkpointer of its own: the LangGraph server supplies persistence. Studio shows its input
(``RAGRequest``), output (``RAGResult``) and context (``RAGContext``: the per-run knobs) schemas;
the retrieve node reports each branch on the ``custom`` stream as it finishes. Input the request
schema does not allow (an unknown key, an empty query) fails the run at its entry, as it does
on every other surface.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from parallel_rag.graph.builder import build_graph  # noqa: E402

graph = build_graph()
