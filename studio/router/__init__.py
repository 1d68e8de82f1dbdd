"""The OpenAI-compatible router: the seed's ``rag`` plugin in front of a chat model (DESIGN §9).

One module a job: ``configuration`` (the router file's schema and loading; the rag plugin block
in ``plugin``, the reranker binding in ``bindings``), ``errors`` (the router's error formatting),
``request`` (what a caller sends), ``matching`` (which route), ``retrieval`` (a route's graph up
to fusion), ``cache`` (the context cache and what invalidates it), ``injection`` (evidence into
the caller's conversation), ``upstream`` (forwarding to the model server), ``report`` (headers
and the ``parallel_rag`` field), ``preview`` (the plan without retrieving), ``runtime`` (the
routes of one config and a chat completion's way through them) and ``app`` (the HTTP surface).
"""
