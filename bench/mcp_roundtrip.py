"""What a round trip through an ``mcp`` branch costs, beside a BM25 branch in the same runs.

One graph with two branches, ``bm25`` over the example corpus (ingested into a temporary
folder) and ``mcp`` calling the ``search`` tool of ``tests/support/mcp_search_server.py`` (a
real MCP server built with the SDK, over stdio, or over streamable HTTP on 127.0.0.1 with
``--http``). Every example question is asked ``--rounds`` times after a warm-up; the branch
records' ``latency_ms`` (the retrieve node's timing of each branch) give the p50 and p95 of
both branches, measured in the same requests. The MCP figure includes the tool's own search
(term overlap over 36 documents: about 0.1 ms). Results: docs/mcp.md.

    python -m bench.mcp_roundtrip [--rounds 20] [--http]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.measure import REPO_ROOT, summary_ms

SERVER_SCRIPT = REPO_ROOT / "tests" / "support" / "mcp_search_server.py"
QUESTIONS = REPO_ROOT / "examples" / "questions.jsonl"


def questions() -> list[str]:
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines if line.strip()]


def pipeline(server: dict) -> dict:
    return {
        "retrievers": [
            {"name": "bm25", "backend": "bm25"},
            {
                "name": "mcp",
                "backend": "mcp",
                "backend_config": {
                    "server_name": "corpus",
                    "tool_name": "search",
                    "arguments": {
                        "query": "${user_content}",
                        "top_k": "${top_k}",
                        "filters": "${filters}",
                    },
                },
            },
        ],
        "mcp_servers": {"corpus": server},
        "generator": {"kind": "extractive", "min_similarity": None},
    }


def measure(server: dict, rounds: int, workdir: Path) -> dict[str, dict[str, float]]:
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.ingestion import ingest_paths

    config = parse_config(pipeline(server))
    ingest_paths([REPO_ROOT / "examples" / "corpus"], config, workdir, progress=False)
    graph = build_graph(config, base_dir=workdir)
    asked = questions()
    for question in asked:  # warm-up: session open, caches, first imports
        graph.invoke({"query": question})
    latencies: dict[str, list[float]] = {"bm25": [], "mcp": []}
    for _ in range(rounds):
        for question in asked:
            for branch in graph.invoke({"query": question})["branches"]:
                if branch["status"] != "ok":
                    raise RuntimeError(f"branch {branch['branch']} failed: {branch['error']}")
                latencies[branch["retriever"]].append(branch["latency_ms"])
    return {name: summary_ms(values) for name, values in latencies.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MCP branch round trip beside a BM25 branch")
    parser.add_argument("--rounds", type=int, default=20, help="passes over the questions")
    parser.add_argument("--http", action="store_true", help="streamable HTTP, not stdio")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds: must be at least 1")
    with tempfile.TemporaryDirectory(prefix="mcp-roundtrip-") as folder:
        workdir = Path(folder)
        if args.http:
            sys.path.insert(0, str(REPO_ROOT / "tests" / "support"))
            from servers import ServerProcess, free_port

            port = free_port()
            with ServerProcess(
                [sys.executable, str(SERVER_SCRIPT), "--http", "--port", str(port)],
                log_path=workdir / "server.log",
            ) as process:
                process.wait_for(f"http://127.0.0.1:{port}/healthz", timeout=60)
                url = f"http://127.0.0.1:{port}/mcp"
                transport = "streamable HTTP"
                stats = measure({"transport": "streamable_http", "url": url}, args.rounds, workdir)
        else:
            transport = "stdio"
            server = {"transport": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT)]}
            stats = measure(server, args.rounds, workdir)
    print(f"| branch ({transport}) | requests | p50 ms | p95 ms | mean ms |")
    print("|---|---:|---:|---:|---:|")
    for name, row in stats.items():
        print(f"| {name} | {row['n']} | {row['p50']:.2f} | {row['p95']:.2f} | {row['mean']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
