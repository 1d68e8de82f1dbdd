"""The graph's nodes, one implementation each: ``rewrite``, ``retrieve`` (+ ``fallback`` for a
hybrid's second leg), ``rerank``, ``fuse`` and ``generate``. Each node's strategies live beside
it (rewriters, scorers, generators); ``failure_policy`` is the one owner of ``on_failure`` (the
error text it reports comes from ``backends.secrets.describe_error``, bounded and redacted);
``records`` holds the value shapes the nodes exchange. Each node is one plain sync callable:
LangGraph runs it in a worker thread under ``ainvoke``/``astream``. Nodes import backends, never
the graph or the surfaces."""
