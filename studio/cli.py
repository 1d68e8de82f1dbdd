"""The ``parallel-rag`` command: ingest files, ask questions, serve, evaluate."""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXIT_USAGE = 2


def _resolve(args: argparse.Namespace):
    """The command's configuration, through the one resolver every command uses."""
    from parallel_rag.studio.config_resolution import resolve_config

    return resolve_config(args.config, route=getattr(args, "route", None))


def cmd_ingest(args: argparse.Namespace) -> int:
    from parallel_rag.studio.ingestion import ingest_paths

    resolved = _resolve(args)
    metadata = {}
    for item in args.metadata or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--metadata: expected KEY=VALUE, got {item!r}")
        metadata[key] = value
    report = ingest_paths(
        args.paths,
        resolved.runnable(),
        resolved.base_dir,
        progress=not args.quiet,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        extra_metadata=metadata or None,
        store=args.store,
        skip_bad_files=args.skip_bad_files,
        max_file_mb=args.max_file_mb,
        fit=not args.no_tune,
    )
    for line in report.skipped:
        print(f"skipped {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        unchanged = ", ".join(report.unchanged)
        unchanged = f"; already up to date: {unchanged}" if unchanged else ""
        print(
            f"ingested {len(report.files)} file(s), {report.chunks} chunk(s) into "
            f"{', '.join(report.indexes)}{unchanged}"
        )
        if report.fusion:
            print(report.fusion)
        if args.timings:
            print(report.timings.table())
    if resolved.router is not None:  # a shared cache is emptied on every replica
        from parallel_rag.studio.router.cache import invalidate_everywhere

        warning = invalidate_everywhere(resolved.router.routing.context_cache)
        if warning:
            print(warning, file=sys.stderr)
    return 0


def format_answer(result: dict) -> str:
    """Human-readable answer: text, the cited sources (with page, slide or section: ``manual.pdf
    p. 6``), and which branches found them."""
    from parallel_rag.nodes.generate.citations import source_label

    lines = [result["answer"], ""]
    resolution = result.get("resolution") or {}
    if resolution.get("retrieved_on") not in (None, resolution.get("question")):
        lines.append(f"(retrieved on: {resolution['retrieved_on']})")
    cited = {c["number"] for c in result["citations"]}
    if result["documents"]:
        lines.append("Sources:")
    for number, doc in enumerate(result["documents"], start=1):
        marker = "*" if number in cited else " "
        found_by = ", ".join(
            f"{s['retriever']} #{s['rank']}"
            + ("" if s["view_kind"] == "original" else f" ({s['view_kind']})")
            for s in doc["sources"]
        )
        source = source_label(doc)
        lines.append(
            f" {marker}[{number}] {source}  (fused {doc['fused_score']:.4f}; found by {found_by})"
        )
    failed = [b for b in result["branches"] if b["status"] == "failed"]
    for branch in failed:
        lines.append(f"branch {branch['branch']} failed: {branch['error']}")
    for warning in result["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def format_progress(event: dict) -> str:
    """One line per finished branch, as the retrieve node reports it on the custom stream."""
    line = (
        f"  {event['branch']} ({event['view_kind']}): {event['status']}, {event['hits']} hit(s), "
        f"{event['latency_ms']:.0f} ms"
    )
    return line + (f" - {event['error']}" if event.get("error") else "")


def run_with_progress(
    graph, request: dict, *, show: bool = True, out=None, config: dict | None = None
) -> dict:
    """Run the graph, printing each branch to ``out`` (stderr) the moment it finishes; returns
    what ``invoke`` would (the streamed state cut to the output schema's keys). ``config``
    names a thread (``thread_config``) when the graph has a checkpointer."""
    out = out or sys.stderr
    state: dict = {}
    # a thread keeps each turn's final state only (not every step's): a few tens of kB a turn
    durability = "exit" if config else None
    for mode, chunk in graph.stream(
        request, config, stream_mode=["custom", "values"], durability=durability
    ):
        if mode == "values":
            state = chunk
        elif show and isinstance(chunk, dict) and chunk.get("event") == "branch_finished":
            print(format_progress(chunk), file=out, flush=True)
    return {key: state[key] for key in graph.output_channels if key in state}


def _require(extra: str, command: str) -> None:
    """A one-line error naming the extra ``command`` needs, before importing it."""
    from parallel_rag.backends.extras import require_extra

    require_extra(extra, f"parallel-rag {command}")


def cmd_serve(args: argparse.Namespace) -> int:
    _require("servers", "serve")
    from parallel_rag.studio.admission import AdmissionLimits
    from parallel_rag.studio.langserve_app import serve

    bounds = {"max_concurrency": args.max_concurrency, "max_queue": args.max_queue}
    bounds = {k: v for k, v in bounds.items() if v is not None}
    limits = AdmissionLimits(**bounds)
    if args.workers < 1:
        raise ValueError(f"--workers: at least 1, got {args.workers}")
    if args.workers > 1:  # several processes on one port (studio/workers.py)
        from parallel_rag.studio.workers import serve_workers

        _resolve(args)  # a bad config fails here, once, not in every worker
        settings = {"config": args.config, "route": args.route, "path": args.path}
        serve_workers(
            {**settings, "limits": bounds}, workers=args.workers, host=args.host, port=args.port
        )
        return 0
    resolved = _resolve(args)
    if resolved.router is not None:  # LangServe plus /v1/chat/completions, one app and gate
        from parallel_rag.studio.router.app import serve_router

        serve_router(resolved, host=args.host, port=args.port, path=args.path, limits=limits)
        return 0
    serve(
        resolved.runnable(),
        base_dir=resolved.base_dir,
        host=args.host,
        port=args.port,
        path=args.path,
        limits=limits,
    )
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    _require("servers", "route")
    from parallel_rag.studio.router.app import preview_question
    from parallel_rag.studio.router.errors import RouterError

    resolved = _resolve(args)
    if resolved.router is None:
        raise ValueError(f"route: {resolved.source} has no routing section (--config FILE)")
    try:
        preview = preview_question(resolved, args.question, args.model)
    except RouterError as error:
        print(f"parallel-rag: {error.message}", file=sys.stderr)
        return 1
    print(json.dumps(preview, indent=2))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    _require("eval", "eval")
    from parallel_rag.studio.evaluation import evaluate

    if args.queries is not None and args.queries < 1:
        raise ValueError(f"--queries: must be at least 1, got {args.queries}")
    if not 1 <= args.depth <= 1000:
        raise ValueError(f"--depth: must be between 1 and 1000, got {args.depth}")
    pipeline = _resolve(args).runnable()
    folder = Path(args.dataset)
    workdir = Path(args.workdir or Path(".parallel-rag-eval") / folder.resolve().name)
    scores = evaluate(
        folder,
        pipeline,
        workdir,
        split=args.split,
        max_queries=args.queries,
        measures=args.measure or ["nDCG@10", "R@100"],
        depth=args.depth,
        progress=not args.quiet,
    )
    from parallel_rag.studio.evaluation import fusion_account
    from parallel_rag.studio.fusion_fit import account_line

    fusion = fusion_account(pipeline, workdir)  # the settings the fused row ran with
    if args.json:
        print(json.dumps({**scores, "fusion": fusion}, indent=2))
        return 0
    measures = list(next(iter(scores.values())))
    print("| retriever | " + " | ".join(measures) + " |")
    print("|---|" + "---:|" * len(measures))
    for name, row in scores.items():
        print(f"| {name} | " + " | ".join(f"{row[m]:.4f}" for m in measures) + " |")
    print(account_line(fusion))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from parallel_rag.graph.fitted_fusion import configures_fusion
    from parallel_rag.studio.fusion_fit import fit_fusion

    resolved = _resolve(args)
    pipeline = resolved.runnable()
    report = fit_fusion(pipeline, resolved.base_dir, queries=args.queries, seed=args.seed)
    if args.json:
        print(json.dumps({**report.record, "path": str(report.path)}, indent=2))
        return 0
    print(f"{report.summary()}\nwritten to {report.path}")
    if configures_fusion(pipeline):
        print("the configuration's fusion: block overrides it: remove the block to use the fit")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    _require("mcp", "mcp")
    from parallel_rag.studio.mcp_server import serve as serve_mcp

    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port: must be between 1 and 65535, got {args.port}")
    resolved = _resolve(args)
    serve_mcp(resolved.runnable(), base_dir=resolved.base_dir, http=args.http, port=args.port)
    return 0


def parse_filters(items: list[str] | None) -> dict[str, str]:
    """``--filter KEY=VALUE`` options as a flat equality filter."""
    filters = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--filter: expected KEY=VALUE, got {item!r}")
        filters[key.strip()] = value
    return filters


def _request(args: argparse.Namespace, question: str) -> dict:
    """The request of ``ask``/``chat``, checked before any model or store is loaded."""
    from parallel_rag.graph.state import coerce_request

    request: dict = {"query": question, "top_k": args.top_k}
    if args.filter:
        request["filters"] = parse_filters(args.filter)
    if args.tenant is not None:
        request["tenant"] = args.tenant
    coerce_request(request)
    return request


def _answer_graph(args: argparse.Namespace, checkpointer=None):
    """The graph ``ask`` and ``chat`` run (the --llm options applied), warmed up."""
    from parallel_rag.graph.builder import build_graphs

    resolved = _resolve(args)
    pipeline = resolved.runnable()
    if args.llm or args.model or args.rewriter:
        from parallel_rag.studio.llm_endpoint import with_llm_endpoint

        pipeline = with_llm_endpoint(
            pipeline, args.llm, model=args.model, rewriter_kind=args.rewriter
        )
    graphs = build_graphs(pipeline, base_dir=resolved.base_dir, checkpointer=checkpointer)
    graphs.warm_up()  # a large store is read now, not inside the branch's timeout
    return graphs.graph


def _print_result(args: argparse.Namespace, result: dict) -> None:
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False, default=_json_default))
    else:
        print(format_answer(result))


def _json_default(value):
    from langchain_core.messages import BaseMessage

    if isinstance(value, BaseMessage):  # the conversation, as the OpenAI API writes turns
        role = {"human": "user", "ai": "assistant"}.get(value.type, value.type)
        return {"role": role, "content": value.text}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def cmd_ask(args: argparse.Namespace) -> int:
    request = _request(args, args.question)
    if args.thread is None:
        result = run_with_progress(_answer_graph(args), request, show=not args.no_progress)
        _print_result(args, result)
        return 0
    from parallel_rag.studio.threads import open_threads, thread_config

    config = thread_config(args.thread)
    with open_threads(_resolve(args).base_dir) as threads:
        graph = _answer_graph(args, threads)
        result = run_with_progress(graph, request, show=not args.no_progress, config=config)
    _print_result(args, result)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive conversation: each line is a question, answered in the thread (a new one
    unless ``--thread`` names one to go on with); an empty line, ``/exit`` or end of input
    ends it."""
    import time

    from parallel_rag.studio.threads import open_threads, thread_config

    name = args.thread or time.strftime("chat-%Y%m%d-%H%M%S")
    config = thread_config(name)
    with open_threads(_resolve(args).base_dir) as threads:
        graph = _answer_graph(args, threads)
        print(f"thread {name} (go on later with: parallel-rag chat --thread {name})", flush=True)
        while True:
            try:
                question = input("> " if sys.stdin.isatty() else "")
            except EOFError:
                break
            if not question.strip() or question.strip() in ("/exit", "/quit"):
                break
            try:
                request = _request(args, question)
            except ValueError as error:  # a bad question is reported; the chat goes on
                print(f"parallel-rag: {error}", file=sys.stderr)
                continue
            result = run_with_progress(graph, request, show=not args.no_progress, config=config)
            _print_result(args, result)
            print(flush=True)
    return 0


ROUTE_HELP = (
    "with a router config: run this route's pipeline (default: the top-level pipeline, else "
    "the routing.default route's, else the first route that retrieves)"
)


def build_parser() -> argparse.ArgumentParser:
    from parallel_rag.studio.ingestion.defaults import CHUNK_OVERLAP, CHUNK_SIZE

    parser = argparse.ArgumentParser(
        prog="parallel-rag",
        description="Parallel RAG on LangGraph: rewrite, fan out to 2-4 retrievers, fuse, answer.",
    )
    parser.add_argument(
        "--config",
        help="YAML config (default: $PARALLEL_RAG_CONFIG, ./parallel-rag.yaml, "
        "else the embedded defaults)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    ingest = commands.add_parser(
        "ingest",
        help="index .md/.txt/.jsonl/.csv/.pdf/.html/.docx/.pptx files into every index",
    )
    ingest.add_argument("paths", nargs="+", help="files or directories")
    ingest.add_argument("--chunk-size", type=int, default=CHUNK_SIZE, help="characters")
    ingest.add_argument("--chunk-overlap", type=int, default=CHUNK_OVERLAP, help="characters")
    ingest.add_argument(
        "--metadata",
        action="append",
        metavar="KEY=VALUE",
        help="metadata added to every chunk (e.g. tenant=acme)",
    )
    ingest.add_argument(
        "--store",
        metavar="NAME",
        help="write only into the managed vector store NAME (created if needed); "
        "a `vectorstore` retriever selects it with vector_store_id: NAME",
    )
    ingest.add_argument(
        "--skip-bad-files",
        action="store_true",
        help="index the usable files and list the bad ones (default: a bad file stops the "
        "ingest before anything is written)",
    )
    ingest.add_argument(
        "--max-file-mb",
        type=float,
        default=200.0,
        metavar="MB",
        help="files larger than this are bad files (default 200)",
    )
    ingest.add_argument("--quiet", action="store_true", help="no progress bars")
    ingest.add_argument(
        "--no-tune", action="store_true", help="do not fit the fusion to the corpus afterwards"
    )
    ingest.add_argument(
        "--timings", action="store_true", help="print each stage's wall and CPU seconds"
    )
    ingest.add_argument(
        "--json", action="store_true", help="print the report (with the timings) as JSON"
    )
    ingest.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    ingest.set_defaults(run=cmd_ingest)

    ask = commands.add_parser("ask", help="answer a question from the indexed documents")
    ask.add_argument("question")
    ask.add_argument("--top-k", type=int, default=5)
    ask.add_argument("--filter", action="append", metavar="KEY=VALUE")
    ask.add_argument("--tenant")
    ask.add_argument("--json", action="store_true", help="print the whole RAGResult as JSON")
    ask.add_argument(
        "--llm",
        metavar="URL",
        help="answer with the chat model at this OpenAI-compatible endpoint "
        "(vLLM, Ollama, llama.cpp, LM Studio; e.g. http://127.0.0.1:8000/v1); the config's "
        "generator.llm settings are kept, max_tokens defaults to 512",
    )
    ask.add_argument("--model", help="model name at --llm (default: the first the server lists)")
    ask.add_argument(
        "--rewriter",
        choices=["multi_query", "decompose", "hyde"],
        help="rewrite the question into query views first, with the --llm model",
    )
    ask.add_argument(
        "--no-progress", action="store_true", help="do not list branches as they finish (stderr)"
    )
    ask.add_argument(
        "--thread",
        metavar="NAME",
        help="go on with (or start) this conversation thread, kept beside the index; a "
        "follow-up like 'who founded it?' is resolved against its earlier turns",
    )
    ask.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    ask.set_defaults(run=cmd_ask)

    chat = commands.add_parser(
        "chat", help="an interactive conversation over the indexed documents (a thread)"
    )
    chat.add_argument("--thread", metavar="NAME", help="go on with this thread (default: new)")
    chat.add_argument("--top-k", type=int, default=5)
    chat.add_argument("--filter", action="append", metavar="KEY=VALUE")
    chat.add_argument("--tenant")
    chat.add_argument("--json", action="store_true", help="print each RAGResult as JSON")
    chat.add_argument("--llm", metavar="URL", help="as for ask")
    chat.add_argument("--model", help="as for ask")
    chat.add_argument("--rewriter", choices=["multi_query", "decompose", "hyde"])
    chat.add_argument("--no-progress", action="store_true", help="do not list branches")
    chat.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    chat.set_defaults(run=cmd_chat)

    serve = commands.add_parser(
        "serve", help="serve the graph with LangServe (invoke/batch/stream/playground)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--path", default="/rag", help="route prefix (default /rag)")
    serve.add_argument(
        "--max-concurrency",
        type=int,
        help="graph runs at once (default: two per CPU core); more requests wait in the queue",
    )
    serve.add_argument(
        "--max-queue",
        type=int,
        help="requests waiting at most (default 64, each up to 60 s); beyond: 503 + Retry-After",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes on the port (default 1); admission limits apply per process",
    )
    serve.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    serve.set_defaults(run=cmd_serve)

    route = commands.add_parser(
        "route",
        help="preview which route a question takes, why, and its retrieval plan (no retrieval)",
    )
    route.add_argument("question")
    route.add_argument("--model", default="auto", help="a route name, or auto (default)")
    route.set_defaults(run=cmd_route)

    evaluate = commands.add_parser(
        "eval",
        help="score each retriever and the fused graph on a BEIR-layout collection",
        description="Index a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) into "
        "the config's bm25 and qdrant retrievers under --workdir, then print each retriever's "
        "and the fused graph's scores (ir_measures).",
    )
    evaluate.add_argument("dataset", help="BEIR folder, e.g. ../shared/data/scifact")
    evaluate.add_argument("--split", default="test", help="qrels file to judge with")
    evaluate.add_argument("--queries", type=int, help="only the first N judged queries (by id)")
    evaluate.add_argument(
        "--measure", action="append", help="ir_measures name, repeatable (default nDCG@10, R@100)"
    )
    evaluate.add_argument("--depth", type=int, default=100, help="documents ranked per query")
    evaluate.add_argument(
        "--workdir", help="where the indexes go (default ./.parallel-rag-eval/<dataset name>)"
    )
    evaluate.add_argument("--json", action="store_true", help="print the scores as JSON")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    evaluate.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    evaluate.set_defaults(run=cmd_eval)

    tune = commands.add_parser(
        "tune",
        help="fit the fusion to the ingested corpus, without labels (ingest does it too)",
        description="Take pseudo-queries out of the stores' chunks, choose the fusion method and "
        "weights that find them best (the shipped default unless one beats it clearly) and save "
        "the choice and its evidence beside the stores; a fusion: block in the configuration "
        "or a run's fusion knobs override it (docs/fusion.md).",
    )
    tune.add_argument("--queries", type=int, default=200, help="pseudo-queries (default 200)")
    tune.add_argument("--seed", type=int, default=0, help="which chunks are sampled")
    tune.add_argument("--json", action="store_true", help="print the whole fit record")
    tune.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    tune.set_defaults(run=cmd_tune)

    mcp = commands.add_parser(
        "mcp",
        help="serve the pipeline as MCP tools (search, ask) over stdio, or streamable HTTP",
        description="Serve the configured pipeline to MCP clients: the tools search (fused "
        "documents with their sources) and ask (answer, citations, documents). stdio by default "
        "(for a client that starts the command); --http serves http://127.0.0.1:PORT/mcp.",
    )
    mcp.add_argument("--http", action="store_true", help="streamable HTTP on 127.0.0.1")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    mcp.add_argument("--route", metavar="NAME", help=ROUTE_HELP)
    mcp.set_defaults(run=cmd_mcp)
    return parser


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


if __name__ == "__main__":
    sys.exit(main())
