"""``parallel-rag ask`` and ``parallel-rag chat``: a question (or a conversation on a thread)
answered by the configured graph."""

from __future__ import annotations

import argparse
import sys

from parallel_rag.studio.cli.common import resolve_config_of
from parallel_rag.studio.cli.output import print_result, run_with_progress


def parse_filters(items: list[str] | None) -> dict[str, str]:
    """``--filter KEY=VALUE`` options as a flat equality filter."""
    filters = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--filter: expected KEY=VALUE, got {item!r}")
        filters[key.strip()] = value
    return filters


def question_request(args: argparse.Namespace, question: str) -> dict:
    """The request of ``ask``/``chat``, checked before any model or store is loaded."""
    from parallel_rag.graph.state import coerce_request

    request: dict = {"query": question, "top_k": args.top_k}
    if args.filter:
        request["filters"] = parse_filters(args.filter)
    if args.tenant is not None:
        request["tenant"] = args.tenant
    coerce_request(request)
    return request


def answer_graph(args: argparse.Namespace, checkpointer=None):
    """The graph ``ask`` and ``chat`` run (the --llm options applied), warmed up."""
    from parallel_rag.graph.builder import build_graphs

    resolved = resolve_config_of(args)
    pipeline = resolved.runnable()
    if args.llm or args.model or args.rewriter:
        from parallel_rag.studio.llm_endpoint import with_llm_endpoint

        pipeline = with_llm_endpoint(
            pipeline, args.llm, model=args.model, rewriter_kind=args.rewriter
        )
    graphs = build_graphs(pipeline, base_dir=resolved.base_dir, checkpointer=checkpointer)
    graphs.warm_up()  # a large store is read now, not inside the branch's timeout
    return graphs.graph


def cmd_ask(args: argparse.Namespace) -> int:
    request = question_request(args, args.question)
    if args.thread is None:
        result = run_with_progress(answer_graph(args), request, show=not args.no_progress)
        print_result(args, result)
        return 0
    from parallel_rag.studio.threads import open_threads, thread_config

    config = thread_config(args.thread)
    with open_threads(resolve_config_of(args).base_dir) as threads:
        graph = answer_graph(args, threads)
        result = run_with_progress(graph, request, show=not args.no_progress, config=config)
    print_result(args, result)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive conversation: each line is a question, answered in the thread (a new one
    unless ``--thread`` names one to go on with); an empty line, ``/exit`` or end of input
    ends it."""
    import time

    from parallel_rag.studio.threads import open_threads, thread_config

    name = args.thread or time.strftime("chat-%Y%m%d-%H%M%S")
    config = thread_config(name)
    with open_threads(resolve_config_of(args).base_dir) as threads:
        graph = answer_graph(args, threads)
        print(f"thread {name} (go on later with: parallel-rag chat --thread {name})", flush=True)
        while True:
            try:
                question = input("> " if sys.stdin.isatty() else "")
            except EOFError:
                break
            if not question.strip() or question.strip() in ("/exit", "/quit"):
                break
            try:
                request = question_request(args, question)
            except ValueError as error:  # a bad question is reported; the chat goes on
                print(f"parallel-rag: {error}", file=sys.stderr)
                continue
            result = run_with_progress(graph, request, show=not args.no_progress, config=config)
            print_result(args, result)
            print(flush=True)
    return 0
