"""End-to-end ``parallel-rag ingest`` throughput (convert + chunk + embed + write) at growing
corpus sizes, with the run's peak RSS, which must stay flat in corpus size.

Run: ``python -m bench.ingest_throughput [--sizes 10000,100000] [--shard 500]`` (prints a
Markdown table; the results go into bench/INGEST-RESULTS.md with the command). Each size is a
fresh folder of JSON-lines files of ``--shard`` documents each (ingest writes a batch of whole
files, so a corpus of many files is what streams in bounded memory), ingested at the shipped
defaults by the real CLI in a child process, into a fresh index folder: wall time, the child's
CPU time and peak RSS (``wait4``), chunks/s and documents/s.

Documents are real text from the shared collections, never copied into the repository:
SciFact, HotpotQA dev500 and Vaswani, interleaved (21,470 distinct documents). A size beyond
that takes each document again joined with a different one (``a + b``, a new document id and
chunk texts, but sentences the sentence-vector store already holds are not embedded again), so
only sizes up to 21,470 are all-new text; the table says how many documents are distinct.
Per-format conversion rates (PDF pages/s, HTML and DOCX documents/s) are
``bench/converters.py``'s (CONVERTER-RESULTS.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.data import data_root

COLLECTIONS = ("scifact", "hotpotqa-dev500", "vaswani")


def real_documents() -> list[dict[str, str]]:
    """Every document of the shared collections, interleaved (one of each in turn)."""
    per_collection = []
    for name in COLLECTIONS:
        with (data_root() / name / "corpus.jsonl").open(encoding="utf-8") as corpus:
            rows = [json.loads(line) for line in corpus if line.strip()]
        per_collection.append(
            [
                {"id": f"{name}-{r['_id']}", "title": r.get("title") or "", "text": r["text"]}
                for r in rows
                if r.get("text", "").strip()
            ]
        )
    mixed = itertools.chain.from_iterable(itertools.zip_longest(*per_collection))
    return [d for d in mixed if d is not None]


def documents(size: int, pool: list[dict[str, str]]) -> Iterator[dict[str, str]]:
    """``size`` documents: the pool, then each pool document joined with the one ``k`` places
    on (round ``k``), under a new id."""
    for n in range(size):
        round_, i = divmod(n, len(pool))
        if round_ == 0:
            yield pool[i]
            continue
        other = pool[(i + round_) % len(pool)]
        doc = pool[i]
        yield {
            "id": f"{doc['id']}+{other['id']}",
            "title": doc["title"],
            "text": f"{doc['text']} {other['text']}",
        }


def write_corpus(folder: Path, size: int, shard: int, pool: list[dict[str, str]]) -> int:
    """The documents as JSON-lines files of ``shard`` records; returns the files written."""
    folder.mkdir(parents=True)
    files = 0
    stream = documents(size, pool)
    while batch := list(itertools.islice(stream, shard)):
        path = folder / f"part-{files:05d}.jsonl"
        path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in batch))
        files += 1
    return files


def ingest(folder: Path, index_dir: Path) -> dict[str, float]:
    """``parallel-rag ingest --quiet folder`` run in ``index_dir``: wall, CPU, peak RSS."""
    index_dir.mkdir(parents=True)
    command = [sys.executable, "-m", "parallel_rag.studio.cli", "ingest", "--quiet", str(folder)]
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=index_dir, stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    output = child.stdout.read() if child.stdout else ""
    if status != 0:
        raise RuntimeError(f"ingest of {folder} failed (status {status}): {output[-400:]}")
    found = re.search(r"(\d+) chunk\(s\)", output)
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "chunks": int(found.group(1)) if found else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes, in documents")
    parser.add_argument("--shard", type=int, default=500, help="documents per JSON-lines file")
    args = parser.parse_args()
    pool = real_documents()
    print(
        f"`python -m bench.ingest_throughput --sizes {args.sizes} --shard {args.shard}`; "
        f"{len(pool)} distinct documents; {os.cpu_count()} CPUs\n"
    )
    print(
        "| documents (distinct) | files | chunks | wall s | CPU s | chunks/s | documents/s "
        "| peak RSS MB | load (1 min) at start / end |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"ingest-throughput-{size}-"))
        try:
            files = write_corpus(work / "corpus", size, args.shard, pool)
            load = os.getloadavg()[0]
            run = ingest(work / "corpus", work / "index")
            print(
                f"| {size:,} ({min(size, len(pool)):,}) | {files} | {run['chunks']:,} "
                f"| {run['wall']:.0f} | {run['cpu']:.0f} | {run['chunks'] / run['wall']:.1f} "
                f"| {size / run['wall']:.1f} | {run['rss_mb']:.0f} "
                f"| {load:.1f} / {os.getloadavg()[0]:.1f} |",
                flush=True,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
