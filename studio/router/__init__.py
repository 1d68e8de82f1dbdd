"""The OpenAI-compatible router: the ``rag`` plugin of a route in front of a chat model
(docs/router.md; vLLM Semantic Router files load too: docs/migrating-from-semantic-router.md).

One module a job: ``configuration`` (the router file's schema and loading; the rag plugin block
in ``plugin``, the reranker binding in ``bindings``), ``errors`` (the router's error formatting),
``request`` (what a caller sends), ``matching`` (which route), ``retrieval`` (a route's graph up
to fusion), ``cache`` (the context cache and what invalidates it), ``injection`` (evidence into
the caller's conversation), ``upstream`` (forwarding to the model server), ``report`` (headers
and the ``parallel_rag`` field), ``preview`` (the plan without retrieving), ``runtime`` (the
routes of one config and a chat completion's way through them), ``app`` (the HTTP surface) and
``semantic_router_compat`` / ``semantic_router_providers`` / ``semantic_router_rag_plugin`` (a
vLLM Semantic Router file mapped onto ours).
"""
