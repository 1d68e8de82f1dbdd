"""Milvus full-text search (BM25 inside the engine) beside the ``bm25`` backend's bm25s, on one
evaluation collection per run (not a test; ``python -m bench`` runs it on all three as its
``fulltext`` section).

Rows, all over the same chunks (``studio.evaluation.corpus_chunks``: one chunk per document,
title and text) and the same judged queries, k = 10:

- ``bm25s english``: the shipped lexical branch (``bm25`` backend, English stopwords and
  Snowball stemming, k1 1.5, b 0.75).
- ``bm25s plain``: the same engine with the ``plain`` analyzer (lowercase ``\\w+`` tokens only),
  the closest our analyzers come to Milvus's ``standard`` one.
- ``milvus standard``: the ``milvus`` backend with ``search: full_text``, written by ingest's
  own writer (``MilvusStore``) into a fresh Milvus Lite file, the engine's default analyzer.
- ``milvus standard+stop``: the same with ``analyzer_params`` adding a ``stop`` filter with the
  English stopwords the ``english`` analyzer drops (what Milvus Lite can do of ``english``: it
  has no stemmer).
- ``milvus, stemmed before``: Milvus's default analyzer over text (and queries) the ``bm25``
  backend's ``english`` analyzer already reduced to its terms: the distance once Milvus Lite
  is given stemmed words, since it cannot stem them itself (``stemmer_probe``).
- ``--server`` adds ``milvus server``: the default-analyzer collection in a ``milvus-lite
  server`` process on 127.0.0.1 (a free port), whose CPU is counted with the client's.

Measured: nDCG@10 (``ir_measures``), build time (wall and CPU: analysis, index, flush),
per-query latency p50/p95 wall, p50 and mean CPU (one query at a time, after one warm-up
query; the server row's CPU includes the server process, so read its mean).

Usage (one collection at a time, reniced, on the shared machine)::

    nice -n 10 python -m bench.milvus_fulltext scifact [--server]
    nice -n 10 python -m bench.milvus_fulltext hotpotqa
    nice -n 10 python -m bench.milvus_fulltext vaswani

Prints a markdown table (and ``--json PATH`` writes the rows).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.data import HOTPOTQA, SCIFACT, VASWANI, DataMissing, require
from bench.measure import pct, tree_cpu_seconds
from bench.tables import cell, markdown_table

COLLECTIONS = {"scifact": SCIFACT, "hotpotqa": HOTPOTQA, "vaswani": VASWANI}
K = 10
SERVER_START_SECONDS = 60


def load(name: str):
    """The collection's corpus, judged test queries and qrels (``BeirCollection``)."""
    from parallel_rag.studio.evaluation import load_beir

    root = require(COLLECTIONS[name], ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
    return load_beir(root, split="test")


class Clock:
    """Wall and CPU seconds of a block. CPU is this process's (``process_time``: every thread,
    Milvus Lite's in-process engine included) plus, for a ``milvus-lite server`` the bench
    started, that process's (``/proc`` clock ticks, 10 ms apart: per query, only the mean
    over all queries is meaningful)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def cpu(self) -> float:
        return time.process_time() + sum(tree_cpu_seconds(pid) for pid in self.pids)

    def time(self, action: Callable[[], Any]) -> tuple[Any, float, float]:
        cpu, wall = self.cpu(), time.perf_counter()
        result = action()
        return result, time.perf_counter() - wall, self.cpu() - cpu


def bm25s_engine(chunks, analyzer: str):
    """(build, search) of the ``bm25`` backend's index with ``analyzer``."""
    from parallel_rag.backends.bm25.index import BM25Index
    from parallel_rag.studio.evaluation import DOC_ID_KEY

    rows = [(c.id, c.content, c.metadata) for c in chunks]
    index: dict[str, Any] = {}

    def build() -> None:
        index["built"] = BM25Index.from_chunks(rows, analyzer=analyzer)

    def search(text: str) -> list[str]:
        return [hit.chunk.metadata[DOC_ID_KEY] for hit in index["built"].search(text, k=K)]

    return build, search


def milvus_engine(chunks, work: Path, uri: str, analyzer_params: dict | None):
    """(build, search) of the ``milvus`` backend with ``search: full_text``: written by ingest's
    writer, searched by the backend's retriever."""
    from parallel_rag.backends.base import BackendContext, ChunkBatch
    from parallel_rag.backends.milvus.retriever import MilvusFullTextRetriever
    from parallel_rag.backends.milvus.settings import MilvusSettings
    from parallel_rag.backends.milvus.writes import MilvusStore
    from parallel_rag.studio.evaluation import ranked_doc_ids

    settings = MilvusSettings(
        collection="bench_full_text",
        uri=uri,
        search="full_text",
        analyzer_params=analyzer_params,
    )
    batch = ChunkBatch(
        ids=[c.id for c in chunks],
        texts=[c.content for c in chunks],
        metadatas=[dict(c.metadata, file_id=c.metadata["doc_id"]) for c in chunks],
    )
    context = BackendContext(work, "unused-by-full-text", "cpu")
    retriever = MilvusFullTextRetriever(settings=settings, base_dir=work, k=K)

    def build() -> None:
        MilvusStore(settings, context).write(batch, [])
        retriever.warm_up()

    def search(text: str) -> list[str]:
        return ranked_doc_ids(retriever.invoke(text, k=K))

    return build, search


def milvus_stemmed_engine(chunks, work: Path, uri: str):
    """(build, search) of Milvus's ``standard`` analyzer over text the ``bm25`` backend's
    ``english`` analyzer has already reduced to its terms (stopwords out, Snowball stems; a
    query's terms once each, as bm25s counts them): what Milvus Lite's full text gives once the
    stemming happens outside it. Query time includes that analysis."""
    from dataclasses import replace

    from parallel_rag.backends.bm25.analysis import analyze

    stemmed = [replace(c, content=" ".join(analyze(c.content, "english"))) for c in chunks]
    build, search = milvus_engine(stemmed, work, uri, None)

    def search_stemmed(text: str) -> list[str]:
        return search(" ".join(dict.fromkeys(analyze(text, "english"))) or text)

    return build, search_stemmed


def measure(name: str, build, search, collection, clock: Clock, log) -> dict[str, Any]:
    from parallel_rag.studio.evaluation import score_runs

    _, build_wall, build_cpu = clock.time(build)
    queries = collection.queries
    search(next(iter(queries.values())))  # warm-up: caches, lazily built segment indexes
    runs, walls, cpus = {}, [], []
    for qid, text in queries.items():
        runs[qid], wall, cpu = clock.time(lambda text=text: search(text))
        walls.append(1000 * wall)
        cpus.append(1000 * cpu)
    ndcg = score_runs(runs, collection.qrels, ["nDCG@10"])["nDCG@10"]
    row = {
        "engine": name,
        "nDCG@10": ndcg,
        "build_wall_s": build_wall,
        "build_cpu_s": build_cpu,
        "p50_ms": pct(walls, 50),
        "p95_ms": pct(walls, 95),
        "p50_cpu_ms": pct(cpus, 50),
        "mean_cpu_ms": sum(cpus) / len(cpus),
        "queries": len(queries),
    }
    log(f"[milvus-fulltext] {name}: " + json.dumps({k: row[k] for k in row if k != "engine"}))
    return row


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    """A ``milvus-lite server`` on 127.0.0.1, waited for; stop it with ``stop_server``."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(data_dir)]
        + ["--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"milvus-lite server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.5)
    stop_server(process)
    raise RuntimeError(f"milvus-lite server did not listen within {SERVER_START_SECONDS}s")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)


def run(name: str, *, collection=None, server: bool = False, log=print) -> dict[str, Any]:
    """Every row on one collection: ``collection`` (a ``BeirCollection``, e.g. a smoke slice)
    or, by default, the whole of ``name``'s judged test queries."""
    from parallel_rag.backends.bm25.analysis import ENGLISH_STOPWORDS
    from parallel_rag.backends.milvus.stores import forget_stores
    from parallel_rag.studio.evaluation import corpus_chunks

    collection = collection if collection is not None else load(name)
    chunks = corpus_chunks(collection.corpus)
    stop = {
        "tokenizer": "standard",
        "filter": [{"type": "stop", "stop_words": sorted(ENGLISH_STOPWORDS)}],
    }
    work = Path(tempfile.mkdtemp(prefix="milvus-fulltext-"))
    clock = Clock([])
    rows = []
    try:
        for analyzer in ("english", "plain"):
            build, search = bm25s_engine(chunks, analyzer)
            rows.append(measure(f"bm25s {analyzer}", build, search, collection, clock, log))
        for label, params in (("standard", None), ("standard+stop", stop)):
            uri = str(work / f"{label}.db")
            build, search = milvus_engine(chunks, work, uri, params)
            rows.append(measure(f"milvus {label}", build, search, collection, clock, log))
            forget_stores(uri)
        uri = str(work / "stemmed.db")
        build, search = milvus_stemmed_engine(chunks, work, uri)
        rows.append(measure("milvus, stemmed before", build, search, collection, clock, log))
        forget_stores(uri)
        if server:
            process, uri = start_server(work / "server")
            try:
                server_clock = Clock([process.pid])
                build, search = milvus_engine(chunks, work, uri, None)
                rows.append(measure("milvus server", build, search, collection, server_clock, log))
            finally:
                forget_stores(uri)
                stop_server(process)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "collection": name,
        "docs": len(collection.corpus),
        "queries": len(collection.queries),
        "load_average": os.getloadavg(),
        "rows": rows,
    }


STEMMER_ANALYZER = {
    "tokenizer": "standard",
    "filter": ["lowercase", {"type": "stemmer", "language": "english"}],
}
"""Milvus's documented English stemmer (``stemmer`` filter), what a Milvus server stems with."""


def stemmer_probe(log=print) -> dict[str, Any]:
    """Whether this Milvus Lite stems: a collection written by ingest's writer with
    ``STEMMER_ANALYZER`` holds "Computers running"; a stemming engine finds it for "computer
    runs" (and, the control, for "computers running"). Also whether it accepts the built-in
    ``{type: english}`` analyzer."""
    from parallel_rag.backends.milvus.stores import forget_stores
    from parallel_rag.studio.evaluation import corpus_chunks

    work = Path(tempfile.mkdtemp(prefix="milvus-stemmer-"))
    texts = {"a": "Computers running", "b": "Unrelated words"}
    chunks = corpus_chunks({doc: {"title": "", "text": text} for doc, text in texts.items()})
    probe: dict[str, Any] = {"analyzer_params": STEMMER_ANALYZER}
    try:
        for label, params in (("stemmer", STEMMER_ANALYZER), ("english", {"type": "english"})):
            uri = str(work / f"{label}.db")
            logging.disable(logging.ERROR)  # pymilvus logs a refusal with its traceback
            try:
                build, search = milvus_engine(chunks, work, uri, params)
                build()
                if search("computers running") != ["a"]:  # the control: the same words
                    probe[label] = "did not find its own words"
                else:
                    stems = search("computer runs") == ["a"]
                    probe[label] = "stems" if stems else "does not stem"
            except Exception as error:  # noqa: BLE001 - a refusal is the finding
                probe[label] = f"refused: {str(error).splitlines()[0][:160]}"
            finally:
                logging.disable(logging.NOTSET)
                forget_stores(uri)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"[milvus-fulltext] stemmer probe: {probe}")
    return probe


def table(result: dict[str, Any]) -> str:
    """One collection's rows: quality against the shipped ``bm25s english`` and against
    ``bm25s plain`` (the same tokens as Milvus's ``standard`` analyzer: what is left of the
    distance once the analyzer is the same), build and query time, wall beside CPU."""
    rows = result["rows"]
    english = next(r["nDCG@10"] for r in rows if r["engine"] == "bm25s english")
    plain = next(r["nDCG@10"] for r in rows if r["engine"] == "bm25s plain")
    title = (
        f"{result['collection']}: {result['docs']:,} docs, {result['queries']} queries "
        f"(load average {result['load_average'][0]:.1f})"
    )
    body = markdown_table(
        [
            "engine",
            "nDCG@10",
            "Δ vs bm25s english",
            "Δ vs bm25s plain",
            "build wall s",
            "build CPU s",
            "p50 ms",
            "p95 ms",
            "p50 CPU ms",
            "mean CPU ms",
        ],
        [
            [
                row["engine"],
                f"{row['nDCG@10']:.4f}",
                f"{row['nDCG@10'] - english:+.4f}",
                f"{row['nDCG@10'] - plain:+.4f}",
                cell(row["build_wall_s"], 2),
                cell(row["build_cpu_s"], 2),
                cell(row["p50_ms"], 2),
                cell(row["p95_ms"], 2),
                cell(row["p50_cpu_ms"], 2),
                cell(row["mean_cpu_ms"], 2),
            ]
            for row in rows
        ],
    )
    return f"{title}\n\n{body}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("collection", choices=sorted(COLLECTIONS))
    parser.add_argument("--server", action="store_true", help="add a milvus-lite server row")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        result = run(args.collection, server=args.server, log=lambda m: print(m, file=sys.stderr))
    except DataMissing as error:
        print(error, file=sys.stderr)
        return 2
    print(table(result))
    print(f"\nMilvus Lite with Milvus's English stemmer: {stemmer_probe(log=lambda m: None)}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
