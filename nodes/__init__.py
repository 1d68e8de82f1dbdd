"""The graph's nodes, one implementation each: ``rewrite``, ``retrieve`` (+ ``fallback`` for a
hybrid's second leg), ``rerank``, ``fuse`` and ``generate``. Each node's strategies live beside
it (rewriters, scorers, generators); ``failure_policy`` is the one owner of ``on_failure`` and of
how errors are described; ``records`` holds the value shapes the nodes exchange. Nodes import
backends, never the graph or the surfaces."""
