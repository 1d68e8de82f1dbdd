"""Retrieval backends and their stores, each a LangChain ``BaseRetriever`` with its settings
model beside it and one entry in ``registry``, plus the infrastructure they share: embeddings,
JSON over HTTP with caps and retries, secrets, the BM25 text analyzer and the atomic on-disk
writer. Nothing here knows the graph."""
