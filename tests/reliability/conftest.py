"""Reliability tests (faults, crashes, load, bad input, security) on real parts. Their shared
fixtures (servers, models, corpora) live in ``tests/support`` and are imported by
``tests/conftest.py``."""
