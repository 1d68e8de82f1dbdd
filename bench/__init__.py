"""Benchmarks of parallel-rag: quality, latency and scale (``python -m bench``)."""
