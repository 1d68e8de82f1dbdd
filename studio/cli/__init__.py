"""The ``parallel-rag`` command: ingest files, ask questions, serve, evaluate.

One module a job: ``parser`` (the commands and their options), ``entry`` (``main``: parse,
run, report errors), ``common`` (the configuration every command resolves, the extra it
needs), ``corpus`` (ingest, eval, tune), ``answers`` (ask, chat), ``output`` (progress and
answers as printed) and ``serving`` (serve, route, mcp). Each command imports what it needs
when it runs, so ``parallel-rag --help`` stays fast.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from parallel_rag.studio.cli.entry import main  # noqa: E402  (the console script's target)

__all__ = ["main"]
