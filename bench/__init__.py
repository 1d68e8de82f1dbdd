"""Benchmarks of parallel-rag: quality, latency and scale (``python -m bench``).

The modules import in one direction (``tests/unit/test_bench_layout.py`` checks it):

* helpers, which import only each other: ``data`` (the collections, smoke slices, the
  synthetic corpus), ``measure`` (percentiles, memory, CPU, a module in a fresh process),
  ``embedding_cache``, ``pipelines`` (the shipped BM25 + Qdrant Edge pipeline over the bench's
  indexes), ``baselines`` (``EnsembleRetriever``, hand-written RRF, a sleeping branch),
  ``scoring`` (the measures of runs and answers), ``tables`` (markdown tables),
  ``offline_llm`` (SmolLM2 on llama.cpp) and ``worker`` (one scale task per process);
* measurements, each runnable alone (``python -m bench.NAME``) and writing its own results
  file, or a section of the harness: ``quality``, ``answers``, ``latency``, ``scale``,
  ``rewriting``, ``fusion_methods``, ``orchestration``, ``ann_stores``, ``bm25_engines``,
  ``query_expansion``, ``rerank``, ``generation_latency``, ``load``, ``mcp_roundtrip``,
  ``router_overhead``, ``converters``, ``milvus_fulltext``, ``architecture``; they import
  helpers, and four run another's measurement (``latency`` runs ``orchestration``'s,
  ``scale`` runs ``ann_stores``'s), never the reverse;
* the runner on top: ``run`` (``python -m bench``) and ``report`` (``RESULTS.md``).
"""
