"""Load benchmark of the LangServe server: throughput, latency percentiles and memory.

    python -m bench.load                          # 2,000 requests at concurrency 16
    python -m bench.load --requests 300 --concurrency 8 --max-concurrency 4
    python -m bench.load --corpus collections --questions mixed   # a ~100k-chunk index

It ingests a corpus with the embedded defaults (BM25 + Qdrant Edge on the packaged MiniLM)
into a work directory (once), starts ``parallel-rag serve`` on 127.0.0.1, warms it up, then
POSTs questions to ``/rag/invoke`` from ``--concurrency`` clients.

``--corpus examples`` is ``examples/corpus`` (80 chunks). ``--corpus collections`` adds the
public collections beside the checkout (SciFact, HotpotQA dev500 and Vaswani from
``../shared/data``, written as Markdown files into the work directory, never into the repo) and
ingests everything with ``--chunk-size`` characters a chunk (160 by default: about 110k chunks).
``--questions examples`` cycles the example questions; ``--questions mixed`` interleaves them
with the HotpotQA and SciFact test questions, so most requests retrieve evidence the server has
not seen before. It samples the server's resident memory (``/proc/PID/status``) while the
requests run and reports:

- throughput (requests/s) and latency p50/p95/p99/max, per status code;
- errors (non-200 answers) and lost branches (a result whose branches are not all ``ok``);
- memory: RSS after warm-up, at every tenth of the run, the peak, and the growth from the first
  tenth to the last (``memory stable`` when under ``--max-growth``, default 10%).

Results go to ``<workdir>/load-results.json`` and a Markdown table on stdout. The server is
stopped by its PID. Exit status 1 when any request failed, a branch was lost or memory grew.

``sweep`` (``python -m bench``'s ``workers`` section) drives one server at rising client
concurrency, once with one worker and once with ``--workers 2``: where one process's throughput
stops rising is the request rate past which a replica, or a second worker, is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.measure import tree_cpu_seconds
from bench.tables import cell, markdown_table

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT / "examples" / "corpus"
QUESTIONS = REPO_ROOT / "examples" / "questions.jsonl"
BIN = Path(sys.executable).parent
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "PYTHONUNBUFFERED": "1",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` (Linux ``VmRSS``), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
COLLECTIONS = ("scifact", "hotpotqa-dev500", "vaswani")
DOCUMENTS_PER_FILE = 200


def write_collections(target: Path) -> int:
    """The public collections as Markdown files under ``target`` (one ``## title`` section a
    document, ``DOCUMENTS_PER_FILE`` documents a file); returns the number of documents."""
    written = 0
    for name in COLLECTIONS:
        source = SHARED_DATA / name / "corpus.jsonl"
        if not source.is_file():
            raise SystemExit(f"--corpus collections: {source} not found (see ../shared/data)")
        folder = target / name
        folder.mkdir(parents=True, exist_ok=True)
        with open(source, encoding="utf-8") as handle:
            sections = []
            for line in handle:
                record = json.loads(line)
                title = (record.get("title") or f"{name} {record['_id']}").strip()
                sections.append(f"## {title}\n\n{record['text'].strip()}")
        for part, start in enumerate(range(0, len(sections), DOCUMENTS_PER_FILE)):
            text = "\n\n".join(sections[start : start + DOCUMENTS_PER_FILE]) + "\n"
            (folder / f"{name}-{part:04d}.md").write_text(text, encoding="utf-8")
        written += len(sections)
    return written


def prepare(workdir: Path, env: dict, corpus: str, chunk_size: int) -> int:
    """Ingest the corpus with the embedded defaults, unless already done; returns the number
    of chunks in the index."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = workdir / ".parallel-rag" / "bm25" / "manifest.json"
    if not manifest.is_file():
        paths = [str(CORPUS)]
        options = ["--quiet"]
        if corpus == "collections":
            documents = write_collections(workdir / "collections")
            print(f"wrote {documents} documents", file=sys.stderr, flush=True)
            paths.append(str(workdir / "collections"))
            options += ["--chunk-size", str(chunk_size), "--chunk-overlap", "0"]
        print(f"ingesting {' '.join(paths)} into {workdir} ...", file=sys.stderr, flush=True)
        started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [str(BIN / "parallel-rag"), "ingest", *paths, *options],
            cwd=workdir,
            env=env,
            check=True,
            stdin=subprocess.DEVNULL,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        (workdir / "ingest.json").write_text(
            json.dumps(
                {
                    "wall_s": round(time.perf_counter() - started, 1),
                    "cpu_s": round(
                        after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1
                    ),
                    "peak_rss_mib": round(after.ru_maxrss / 1024, 1),
                }
            )
        )
    return count_chunks(workdir)


def count_chunks(workdir: Path) -> int:
    """Chunks in the BM25 index (every chunk is in every index)."""
    data = json.loads((workdir / ".parallel-rag" / "bm25" / "manifest.json").read_text())
    for key in ("num_chunks", "documents", "count", "chunks"):
        if isinstance(data.get(key), int):
            return data[key]
    ids = data.get("ids")
    return len(ids) if isinstance(ids, list) else -1


def load_questions(kind: str) -> list[str]:
    examples = [
        json.loads(line)["question"]
        for line in QUESTIONS.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    if kind == "examples":
        return examples
    others: list[str] = []
    for name in ("hotpotqa-dev500", "scifact"):
        path = SHARED_DATA / name / "queries.jsonl"
        if path.is_file():
            others += [json.loads(line)["text"] for line in path.read_text().splitlines()[:500]]
    mixed: list[str] = []
    for i, question in enumerate(others):
        mixed.append(question)
        if i % 4 == 0:
            mixed.append(examples[(i // 4) % len(examples)])
    return mixed or examples


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of ``pid`` and its waited-for children (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def write_config(workdir: Path, sentence_cache_size: int) -> Path:
    """The embedded defaults with ``generator.sentence_cache_size`` changed, as a YAML file."""
    import yaml
    from parallel_rag.graph.loading import load_config

    config, _ = load_config(None)
    data = config.model_dump(mode="json", exclude_none=True)
    data["generator"]["sentence_cache_size"] = sentence_cache_size
    path = workdir / f"sentence-cache-{sentence_cache_size}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


class Server:
    """``parallel-rag serve`` in its own session; output to ``server.log``; stopped by PID."""

    def __init__(
        self, workdir: Path, env: dict, port: int, extra: list[str], config_args: list[str]
    ):
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(workdir / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        command = [str(BIN / "parallel-rag"), *config_args, "serve", "--port", str(port), *extra]
        self.process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError("server did not become ready")

    def stop(self) -> None:
        try:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
        finally:
            self.log.close()


class MemorySampler(threading.Thread):
    """Samples the server's RSS every ``interval`` seconds, tagged with requests completed."""

    def __init__(self, pid: int, interval: float, progress):
        super().__init__(daemon=True)
        self.pid, self.interval, self.progress = pid, interval, progress
        self.samples: list[tuple[int, int]] = []  # (requests done, rss bytes)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            rss = rss_bytes(self.pid)
            if rss is not None:
                self.samples.append((self.progress(), rss))
            self.done.wait(self.interval)


async def drive(url: str, questions: list[str], requests: int, concurrency: int, record):
    import httpx

    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def worker() -> None:
            for i in counter:
                body = {"input": {"query": questions[i % len(questions)]}}
                started = time.perf_counter()
                try:
                    response = await client.post(f"{url}/rag/invoke", json=body)
                    status, payload = response.status_code, response.json()
                except Exception as error:  # noqa: BLE001 - a transport failure is a result
                    status, payload = 0, {"error": repr(error)}
                record(status, payload, time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def memory_report(samples: list[tuple[int, int]], requests: int) -> dict:
    """RSS at each tenth of the run and the growth from the first tenth to the last."""
    if not samples:
        return {}
    tenths = []
    for k in range(1, 11):
        upto = [rss for done, rss in samples if done <= k * requests / 10]
        tenths.append(upto[-1] if upto else samples[0][1])
    first = statistics.median(
        [rss for done, rss in samples if done <= requests / 10] or [tenths[0]]
    )
    last = statistics.median(
        [rss for done, rss in samples if done >= 0.9 * requests] or [tenths[-1]]
    )
    return {
        "rss_at_tenths_mib": [round(v / 2**20, 1) for v in tenths],
        "rss_first_tenth_mib": round(first / 2**20, 1),
        "rss_last_tenth_mib": round(last / 2**20, 1),
        "rss_peak_mib": round(max(rss for _, rss in samples) / 2**20, 1),
        "growth_first_to_last_tenth": round((last - first) / first, 4),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16, help="client connections")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--max-concurrency", type=int, help="the server's bound (default: its own)")
    parser.add_argument(
        "--workers", type=int, default=1, help="serve --workers (CPU then counts every worker)"
    )
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench" / "out" / "load")
    parser.add_argument("--sample-interval", type=float, default=0.5)
    parser.add_argument("--max-growth", type=float, default=0.10)
    parser.add_argument("--corpus", choices=("examples", "collections"), default="examples")
    parser.add_argument("--chunk-size", type=int, default=160, help="with --corpus collections")
    parser.add_argument("--questions", choices=("examples", "mixed"), default="examples")
    parser.add_argument(
        "--sentence-cache",
        type=int,
        help="serve with generator.sentence_cache_size set to this (0: the uncached baseline)",
    )
    return parser.parse_args(argv)


def start_server(
    args: argparse.Namespace, env: dict
) -> tuple[Server, Callable[[int], float | None]]:
    """``parallel-rag serve`` as ``args`` asks, ready and warmed up with ``args.warmup``
    requests, and how to read its CPU seconds (every worker's with ``--workers``)."""
    extra = ["--max-concurrency", str(args.max_concurrency)] if args.max_concurrency else []
    extra += ["--workers", str(args.workers)] if args.workers > 1 else []
    # several workers: the supervisor's live children count too (``cutime`` waits for exits)
    server_cpu = process_cpu_seconds if args.workers == 1 else tree_cpu_seconds
    config_args = []
    if args.sentence_cache is not None:
        config_args = ["--config", str(write_config(args.workdir, args.sentence_cache))]
    server = Server(args.workdir, env, free_port(), extra, config_args)
    try:
        server.wait_ready()
        questions = load_questions(args.questions)
        asyncio.run(drive(server.url, questions, args.warmup, args.concurrency, lambda *a: None))
    except BaseException:
        server.stop()
        raise
    return server, server_cpu


def run_requests(
    server: Server,
    server_cpu: Callable[[int], float | None],
    questions: list[str],
    requests: int,
    concurrency: int,
    sample_interval: float,
) -> dict:
    """``requests`` questions at ``concurrency`` connections against a ready server: throughput,
    latency percentiles, failures, the server's CPU per request and its memory over the run."""
    results: list[tuple[int, float, bool]] = []  # (status, seconds, all branches ok)
    errors: dict[str, int] = {}

    def record(status: int, payload: dict, seconds: float) -> None:
        branches = (payload.get("output") or {}).get("branches") or []
        intact = status == 200 and bool(branches) and all(b["status"] == "ok" for b in branches)
        results.append((status, seconds, intact))
        if not intact:
            reason = (
                f"HTTP {status}"
                if status != 200
                else "; ".join(
                    f"{b['retriever']}: {b['status']} {b['error']}"
                    for b in branches
                    if b["status"] != "ok"
                )
            )
            errors[reason[:200]] = errors.get(reason[:200], 0) + 1

    sampler = MemorySampler(server.process.pid, sample_interval, lambda: len(results))
    sampler.start()
    cpu_before = server_cpu(server.process.pid)
    started = time.perf_counter()
    try:
        asyncio.run(drive(server.url, questions, requests, concurrency, record))
    finally:
        elapsed = time.perf_counter() - started
        cpu_after = server_cpu(server.process.pid)
        sampler.done.set()
        sampler.join()
    latencies = sorted(seconds for _, seconds, _ in results)
    failed = sum(1 for status, _, _ in results if status != 200)
    return {
        "requests": requests,
        "client_concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "throughput_rps": round(len(results) / elapsed, 3),
        "server_cpu_ms_per_request": (
            round(1000 * (cpu_after - cpu_before) / max(1, len(results)), 1)
            if cpu_before is not None and cpu_after is not None
            else None
        ),
        "latency_s": {
            "p50": round(percentile(latencies, 0.50), 3),
            "p95": round(percentile(latencies, 0.95), 3),
            "p99": round(percentile(latencies, 0.99), 3),
            "max": round(latencies[-1], 3) if latencies else None,
        },
        "errors": failed,
        "lost_branches": sum(1 for status, _, ok in results if status == 200 and not ok),
        "problems": errors,
        "memory": memory_report(sampler.samples, requests),
    }


def measure(args: argparse.Namespace) -> dict:
    """One server as ``args`` asks, one run of ``args.requests`` requests: the report."""
    load_before = os.getloadavg()
    env = {**os.environ, **ENV}
    env.pop("PARALLEL_RAG_CONFIG", None)  # the embedded defaults, always
    chunks = prepare(args.workdir, env, args.corpus, args.chunk_size)
    questions = load_questions(args.questions)
    server, server_cpu = start_server(args, env)
    try:
        baseline = rss_bytes(server.process.pid) or 0
        run = run_requests(
            server, server_cpu, questions, args.requests, args.concurrency, args.sample_interval
        )
    finally:
        server.stop()
    ingest_path = args.workdir / "ingest.json"
    report = {
        "corpus": args.corpus,
        "chunks": chunks,
        "ingest": json.loads(ingest_path.read_text()) if ingest_path.is_file() else None,
        "questions": args.questions,
        "distinct_questions": len(questions),
        "load_average_before": load_before,
        "server_max_concurrency": args.max_concurrency or "default",
        "workers": args.workers,
        "sentence_cache_size": "default" if args.sentence_cache is None else args.sentence_cache,
        "cpu_count": os.cpu_count(),
        **run,
        "load_average_after": os.getloadavg(),
        "rss_after_warmup_mib": round(baseline / 2**20, 1),
    }
    report["memory_stable"] = (
        report["memory"].get("growth_first_to_last_tenth", 0.0) < args.max_growth
    )
    return report


def sweep(argv: list[str], workers: int, concurrencies: list[int]) -> list[dict]:
    """One server with ``workers`` workers (``argv`` as the command line takes it, for the
    corpus, questions, requests and work folder), driven at each client concurrency in turn:
    where its throughput stops rising is the request rate it saturates at."""
    args = parse_args([*argv, "--workers", str(workers)])
    env = {**os.environ, **ENV}
    env.pop("PARALLEL_RAG_CONFIG", None)
    chunks = prepare(args.workdir, env, args.corpus, args.chunk_size)
    questions = load_questions(args.questions)
    server, server_cpu = start_server(args, env)
    rows = []
    try:
        for concurrency in concurrencies:
            load = os.getloadavg()[0]
            run = run_requests(
                server, server_cpu, questions, args.requests, concurrency, args.sample_interval
            )
            run.pop("memory")
            rows.append({"workers": workers, "chunks": chunks, "load_average": load, **run})
    finally:
        server.stop()
    return rows


def cores_busy(row: dict) -> float | None:
    """The server's CPU seconds per second of the run (req/s x CPU s a request): how much of
    the machine it got. One process saturates near one core (the GIL); on a shared machine it
    may get less, which the wall-clock columns alone would hide."""
    cpu_ms = row.get("server_cpu_ms_per_request")
    return None if cpu_ms is None else row["throughput_rps"] * cpu_ms / 1000


def sweep_table(rows: list[dict]) -> str:
    """Throughput beside the server's CPU per request (and the cores that makes busy) and the
    latency, one row a (workers, concurrency)."""
    return markdown_table(
        [
            "workers",
            "client concurrency",
            "req/s",
            "server CPU ms/req",
            "server cores busy",
            "p50 s",
            "p95 s",
            "errors",
            "lost",
            "load avg",
        ],
        [
            [
                row["workers"],
                row["client_concurrency"],
                cell(row["throughput_rps"], 1),
                cell(row["server_cpu_ms_per_request"], 1),
                cell(cores_busy(row), 2),
                cell(row["latency_s"]["p50"]),
                cell(row["latency_s"]["p95"]),
                row["errors"],
                row["lost_branches"],
                cell(row["load_average"], 1),
            ]
            for row in rows
        ],
        align="r" * 10,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = measure(args)
    (args.workdir / "load-results.json").write_text(json.dumps(report, indent=2) + "\n")
    lat, memory, stable = report["latency_s"], report["memory"], report["memory_stable"]
    failed, lost = report["errors"], report["lost_branches"]
    print(
        "| corpus | chunks | questions | requests | concurrency | req/s | server CPU ms/req "
        "| p50 s | p95 s | p99 s | max s | errors | lost |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.corpus} | {report['chunks']} | {args.questions} | {args.requests} "
        f"| {args.concurrency} | {report['throughput_rps']} "
        f"| {report['server_cpu_ms_per_request']} | {lat['p50']} | "
        f"{lat['p95']} | {lat['p99']} | {lat['max']} | {failed} | {lost} |"
    )
    if memory:
        print(
            f"\nRSS (MiB): after warm-up {report['rss_after_warmup_mib']}, per tenth "
            f"{memory['rss_at_tenths_mib']}, peak {memory['rss_peak_mib']}; growth first->last "
            f"tenth {memory['growth_first_to_last_tenth']:+.1%} "
            f"({'stable' if stable else 'GROWING'})"
        )
    print(f"\nresults: {args.workdir / 'load-results.json'}")
    return 0 if not failed and not lost and stable else 1


if __name__ == "__main__":
    sys.exit(main())
