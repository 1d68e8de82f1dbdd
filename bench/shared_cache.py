"""The router's context cache in Redis beside the in-process one (not a test; ``python -m bench``
runs it as its ``cache`` section). Starts its own ``redis-server`` on 127.0.0.1 (a free port, no
persistence, stopped by PID).

1. Hit latency: ``lookup`` of a cached context (a real fused result of 4 documents, about 4 kB
   of JSON) on ``ContextCache`` and on ``RedisContextCache``, wall p50/p95 and CPU p50 of this
   process (the Redis server's CPU is not in it), after a warm-up.
2. Hit rate on a repeated-question workload: ``--requests`` questions drawn from ``--questions``
   distinct ones (Zipf, s = 1.1, fixed seed), answered by one replica with its own in-process
   cache, by two replicas each with its own in-process cache (round robin: what replicas
   without a shared cache get), and by two replicas sharing Redis.

Usage::

    nice -n 10 python -m bench.shared_cache [--requests 2000 --questions 200]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.measure import pct
from bench.tables import cell, markdown_table

ENTRY = {
    "documents": [
        {
            "id": f"00000000-0000-0000-0000-00000000000{i}",
            "content": "Ada Lovelace wrote the first published algorithm for Babbage's engine. "
            * 12,
            "metadata": {"source": "ada-lovelace.md", "section": "Notes", "page": i},
            "score": 0.03 - i / 1000,
            "sources": [{"retriever": "lexical", "rank": i}, {"retriever": "dense", "rank": i}],
        }
        for i in range(4)
    ],
    "branches": [{"retriever": "lexical", "status": "ok"}, {"retriever": "dense", "status": "ok"}],
    "warnings": [],
}


def key_of(question: str) -> tuple:
    return ("docs", question, "{}", None, 4, (("lexical", None), ("dense", None)), "minilm", None)


def start_redis(directory: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        + ["--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("redis-server did not listen within 30 s")


def hit_latency(cache, repeats: int) -> dict[str, float]:
    key = key_of("who was ada lovelace?")
    cache.put(key, cache.lookup(key, [])[1], ENTRY)
    for _ in range(50):
        cache.lookup(key, [])
    walls, cpus = [], []
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        found, _ = cache.lookup(key, [])
        walls.append(1000 * (time.perf_counter() - wall))
        cpus.append(1000 * (time.process_time() - cpu))
        assert found is not None
    return {"p50_ms": pct(walls, 50), "p95_ms": pct(walls, 95), "p50_cpu_ms": pct(cpus, 50)}


def hit_rate(caches: list, workload: list[str]) -> float:
    hits = 0
    for i, question in enumerate(workload):
        cache = caches[i % len(caches)]
        key = key_of(question)
        found, generation = cache.lookup(key, [])
        if found is None:
            cache.put(key, generation, ENTRY)
        else:
            hits += 1
    return hits / len(workload)


def measure(requests: int = 2000, questions: int = 200, repeats: int = 2000) -> dict:
    """Both measurements on a ``redis-server`` of its own (started and stopped here): the hit
    latency of each cache, and the hit rate of one replica, two with a cache each and two
    sharing Redis on the same Zipf workload."""
    from parallel_rag.studio.router.cache import ContextCache, RedisContextCache

    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not installed (`make redis`); nothing was measured")
    rng = np.random.default_rng(0)
    ranks = np.minimum(rng.zipf(1.1, size=requests), questions)
    workload = [f"question number {int(r)}" for r in ranks]
    work = Path(tempfile.mkdtemp(prefix="shared-cache-"))
    process, url = start_redis(work)
    try:

        def redis_cache(namespace: str):
            return RedisContextCache("docs", url, max_entries=4096, ttl=600, namespace=namespace)

        latency = {
            "in-process": hit_latency(ContextCache(4096, 600), repeats),
            "Redis (loopback)": hit_latency(redis_cache("latency"), repeats),
        }
        rates = {
            "one replica, in-process cache": hit_rate([ContextCache(4096, 600)], workload),
            "two replicas, in-process caches": hit_rate(
                [ContextCache(4096, 600), ContextCache(4096, 600)], workload
            ),
            "two replicas, shared Redis": hit_rate(
                [redis_cache("rate"), redis_cache("rate")], workload
            ),
        }
    finally:
        process.terminate()
        process.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "requests": requests,
        "distinct_questions": len(set(workload)),
        "repeats": repeats,
        "latency": latency,
        "added_p50_ms": latency["Redis (loopback)"]["p50_ms"] - latency["in-process"]["p50_ms"],
        "hit_rates": rates,
        "rate_gap_points": 100
        * (rates["two replicas, shared Redis"] - rates["one replica, in-process cache"]),
    }


def tables(result: dict) -> str:
    """The hit latency table (wall beside CPU) and the hit rate table, as markdown."""
    latency = markdown_table(
        ["cache", "hit p50 ms", "hit p95 ms", "hit p50 CPU ms"],
        [
            [name, cell(row["p50_ms"]), cell(row["p95_ms"]), cell(row["p50_cpu_ms"])]
            for name, row in result["latency"].items()
        ],
    )
    rates = markdown_table(
        [
            f"workload: {result['requests']} requests, "
            f"{result['distinct_questions']} distinct questions",
            "hit rate",
        ],
        [[name, f"{100 * rate:.1f}%"] for name, rate in result["hit_rates"].items()],
    )
    added = f"Redis hit adds {result['added_p50_ms']:.3f} ms p50 wall."
    return f"{latency}\n\n{added}\n\n{rates}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args(argv)
    try:
        result = measure(args.requests, args.questions, args.repeats)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 2
    print(tables(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
