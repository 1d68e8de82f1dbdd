"""The ``parallel-rag`` entry point: parse the command line before importing anything heavy,
run the command, and turn the errors a user can fix into one line on stderr."""

from __future__ import annotations

import sys

from parallel_rag.studio.cli.parser import build_parser

EXIT_USAGE = 2


def keep_library_logs_out() -> None:
    """Only warnings reach stderr, as with no logging set up, whatever a library does later.

    Python's ``logging.warning()`` installs a DEBUG-passing root handler when the root has none
    (ONNX Runtime's quantizer logs so on the first ingest, when the int8 graph is built), and
    bm25s sets its own logger to DEBUG: its debug lines then showed in ``ingest``'s output. A
    root handler of our own (Python's last-resort one: warnings and up, message only) is there
    first, so that implicit set-up never happens."""
    import logging

    root = logging.getLogger()
    if not root.handlers and logging.lastResort is not None:
        root.addHandler(logging.lastResort)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # before any import: --help stays fast
    keep_library_logs_out()

    from parallel_rag.backends.base import StoreInUseError
    from parallel_rag.graph.configuration import ConfigError
    from parallel_rag.graph.errors import problem_lines, problems
    from parallel_rag.nodes.failure_policy import RAGError
    from parallel_rag.studio.documents import DocumentLoadError
    from pydantic import ValidationError

    try:
        return args.run(args)
    except ValidationError as error:
        for line in problem_lines(problems(error)):
            print(f"parallel-rag: invalid request: {line}", file=sys.stderr)
        return EXIT_USAGE
    except (
        ConfigError,
        DocumentLoadError,
        RAGError,
        ValueError,
        FileNotFoundError,
        LookupError,
        StoreInUseError,
    ) as error:
        print(f"parallel-rag: {error}", file=sys.stderr)
        return 1
