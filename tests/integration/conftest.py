"""Integration tests on real parts: the shared fixtures live in
``tests/support`` (on ``sys.path`` through pytest's ``pythonpath`` setting)."""

from llm_fixtures import llm_server, llm_settings  # noqa: F401  (SmolLM2 server)
from real_fixtures import example_graph, example_index, example_questions  # noqa: F401
