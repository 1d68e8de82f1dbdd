"""What the OpenAI-compatible router costs, measured against its real upstream.

    python -m bench.router_overhead                       # starts SmolLM2 on llama.cpp itself
    python -m bench.router_overhead --upstream http://127.0.0.1:8080/v1 --model smollm2

It ingests ``examples/corpus`` into a work directory, writes a router config with a
pass-through route (``chat``) and a retrieving route (``docs``: BM25 + Qdrant, fused), starts
``parallel-rag serve`` on 127.0.0.1 (stopped by its PID) and measures, alternating direct and
routed calls so both see the same machine load:

- pass-through overhead: p50 latency of a 1-token completion through the router minus direct;
- time to first streamed token (first content chunk) through the router vs direct;
- a retrieving route's latency on a context-cache miss (first time a question is asked) vs a
  hit (the same question again), both with 1-token completions.

Results go to ``<workdir>/router-overhead.json`` and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT / "examples" / "corpus"
QUESTIONS = REPO_ROOT / "examples" / "questions.jsonl"
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=3) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f}s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def start_llama(workdir: Path) -> tuple[subprocess.Popen, str]:
    from parallel_rag.nodes.chat_models import smollm2_gguf_path

    port = free_port()
    log = open(workdir / "llama.log", "wb")  # noqa: SIM115 - lives as long as the server
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf_path())]
    command += ["--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--n_ctx", "4096"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    wait_for(url + "/models", process)
    return process, url


def write_config(workdir: Path, upstream: str, model: str) -> Path:
    retrievers = [
        {"name": "lexical", "backend": "bm25", "top_k": 20,
         "backend_config": {"index_path": ".parallel-rag/bm25"}},
        {"name": "dense", "backend": "qdrant", "top_k": 20,
         "backend_config": {"collection": "docs", "path": ".parallel-rag/qdrant"}},
    ]  # fmt: skip
    config = {
        "retrievers": retrievers,
        "upstream": {"base_url": upstream, "timeouts": {"read": 300}},
        "routing": {
            "default": "chat",
            "context_cache": {"max_entries": 1000, "ttl_seconds": 3600},
            "decisions": [
                {"name": "chat", "model": model},
                {
                    "name": "docs",
                    "model": model,
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {
                                "retrievers": retrievers,
                                "top_k": 3,
                                "max_context_length": 1500,
                            },
                        }
                    ],
                },
            ],
        },
    }
    path = workdir / "router.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def completion_ms(client: httpx.Client, url: str, body: dict, context: list | None = None):
    """Wall time of one completion; ``context`` collects the router's own measure of the time
    it spent obtaining context (``x-parallel-rag-context-ms``: retrieval, or a cache lookup)."""
    started = time.perf_counter()
    response = client.post(url + "/chat/completions", json=body)
    response.raise_for_status()
    if context is not None:
        context.append(float(response.headers["x-parallel-rag-context-ms"]))
    return (time.perf_counter() - started) * 1000


def first_token_ms(client: httpx.Client, url: str, body: dict) -> float:
    started = time.perf_counter()
    with client.stream("POST", url + "/chat/completions", json={**body, "stream": True}) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content"):
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("no content chunk in the stream")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", help="OpenAI-compatible base URL (default: start SmolLM2)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--requests", type=int, default=30, help="per measurement and side")
    parser.add_argument("--workdir", default=".parallel-rag-bench/router")
    args = parser.parse_args(argv)

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    llama = None
    upstream = args.upstream
    if upstream is None:
        llama, upstream = start_llama(workdir)
    config = write_config(workdir, upstream.rstrip("/"), args.model)
    subprocess.run(
        [str(BIN / "parallel-rag"), "--config", str(config), "ingest", "--quiet", str(CORPUS)],
        check=True,
        env=env,
    )
    port = free_port()
    log = open(workdir / "router.log", "wb")  # noqa: SIM115 - closed below
    router = subprocess.Popen(
        [str(BIN / "parallel-rag"), "--config", str(config), "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    routed = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for(routed + "/models", router)
        questions = [
            json.loads(line)["question"]
            for line in QUESTIONS.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        one_token = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 1}
        results: dict[str, dict[str, float]] = {}
        with httpx.Client(timeout=300) as client:
            for _ in range(3):  # warm both paths (model load, connection pools)
                completion_ms(client, upstream, {**one_token, "model": args.model})
                completion_ms(client, routed, {**one_token, "model": "chat"})
            direct, through = [], []
            for _ in range(args.requests):
                direct.append(completion_ms(client, upstream, {**one_token, "model": args.model}))
                through.append(completion_ms(client, routed, {**one_token, "model": "chat"}))
            results["pass-through, 1-token completion"] = {
                "direct_p50_ms": p50(direct),
                "router_p50_ms": p50(through),
                "added_p50_ms": round(p50(through) - p50(direct), 2),
            }
            stream = {"messages": [{"role": "user", "content": "Tell me a story."}],
                      "max_tokens": 8}  # fmt: skip
            direct, through = [], []
            for _ in range(args.requests):
                direct.append(first_token_ms(client, upstream, {**stream, "model": args.model}))
                through.append(first_token_ms(client, routed, {**stream, "model": "chat"}))
            results["time to first streamed token"] = {
                "direct_p50_ms": p50(direct),
                "router_p50_ms": p50(through),
                "added_p50_ms": round(p50(through) - p50(direct), 2),
            }
            asked = questions[: args.requests]
            miss, hit, miss_context, hit_context = [], [], [], []
            for question in asked:
                body = {"model": "docs", "max_tokens": 1,
                        "messages": [{"role": "user", "content": question}]}  # fmt: skip
                miss.append(completion_ms(client, routed, body, miss_context))
                hit.append(completion_ms(client, routed, body, hit_context))
            # the wall times include the upstream, whose own prompt cache also favours the
            # repeat; the router's context time is the cache's effect alone
            results["docs route: context (retrieval vs cache lookup)"] = {
                "miss_p50_ms": p50(miss_context),
                "hit_p50_ms": p50(hit_context),
                "questions": len(asked),
            }
            results["docs route: whole 1-token completion"] = {
                "miss_p50_ms": p50(miss),
                "hit_p50_ms": p50(hit),
            }
    finally:
        stop(router)
        log.close()
        if llama is not None:
            stop(llama)
    (workdir / "router-overhead.json").write_text(json.dumps(results, indent=2))
    print(f"| measurement ({args.requests} requests a side) | values |")
    print("|---|---|")
    for name, values in results.items():
        print(f"| {name} | " + ", ".join(f"{k} {v}" for k, v in values.items()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
