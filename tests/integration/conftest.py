"""Integration tests on real parts. Their shared fixtures (servers, models, corpora) live in
``tests/support`` and are imported by ``tests/conftest.py``."""
