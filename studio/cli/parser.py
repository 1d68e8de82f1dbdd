"""The ``parallel-rag`` command line: every command, its options and the function that runs it.
Only the standard library is imported here (each command imports what it needs when it runs),
so ``parallel-rag --help`` stays fast."""

from __future__ import annotations

import argparse

from parallel_rag.studio.cli.answers import cmd_ask, cmd_chat
from parallel_rag.studio.cli.common import ROUTE_HELP
from parallel_rag.studio.cli.corpus import cmd_eval, cmd_ingest, cmd_tune
from parallel_rag.studio.cli.serving import cmd_mcp, cmd_route, cmd_serve


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
