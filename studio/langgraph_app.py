"""The graphs ``langgraph.json`` serves (LangGraph Studio / ``langgraph dev``): ``graph``, the
answer graph, and ``retrieval``, its retrieval graph (up to ``fuse``, no answer), compiled
together by ``build_graphs`` from the same components: each ``StateGraph.compile()``'s own
result.

The configuration is resolved as every ``parallel-rag`` command resolves it
(``studio/config_resolution.py``): ``$PARALLEL_RAG_CONFIG`` or ./parallel-rag.yaml, else the
embedded defaults; a router file serves its top-level pipeline, else its default or first
retrieving route's. It has no checkpointer of its own: the LangGraph server supplies
persistence. Studio shows its input (``RAGRequest``), output (``RAGResult``,
``RetrievalResult``) and context (``RAGContext``: the per-run knobs, drawn as the run's context
form) schemas; the retrieve node reports each branch on the ``custom`` stream as it finishes.
A bad value (an empty query, a bad ``top_k``) fails the run at its entry, before any node; a
key the request schema does not name is dropped by the LangGraph server, as by any LangGraph
graph (``graph/request.py``).
"""

import os
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from parallel_rag.graph.builder import build_graphs  # noqa: E402
from parallel_rag.studio.config_resolution import resolve_config  # noqa: E402

_resolved = resolve_config()
graphs = build_graphs(_resolved.runnable(), base_dir=_resolved.base_dir)
graph = graphs.graph
retrieval = graphs.retrieval

# The server imports this module as it starts: the embedding model and the branches' stores
# load on a thread of their own meanwhile (``RAGGraphs.warm_up``), so neither startup nor
# the first run's branch timeouts wait for a large store to be read.
threading.Thread(target=graphs.warm_up, name="parallel-rag-warm-up", daemon=True).start()
