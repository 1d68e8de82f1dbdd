"""Retrieval backends and their stores, one package each (``<name>/``: ``settings.py`` the
settings model, ``retriever.py`` a LangChain ``BaseRetriever`` and its store writer,
``__init__.py`` the ``BackendSpec`` that ``registry`` lists, whose hooks import ``retriever.py``
when called), plus the infrastructure they share: encoders (``encoders/``), JSON over HTTP with
caps and retries, secrets and the atomic on-disk writer (``shared/``), the BM25 text analyzer.
Nothing here knows the graph."""
