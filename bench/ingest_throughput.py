"""End-to-end ``parallel-rag ingest`` throughput (convert + chunk + embed + write) at growing
corpus sizes, with the run's peak RSS, which must stay flat in corpus size; and, with
``--ratio``, issue 35's ratio: ingest of SciFact's first 1,500 abstracts against plain
sentence-transformers encoding each abstract once, in the same run, with each ingest stage's
wall and CPU time (``ingest --json``) and what each optional part (the sentence shard of the
dense store, the generator's stored sentence vectors, the fusion fit) buys in retrieval
quality and answer latency on the SciFact queries judged inside the slice.

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


# ------------------------------------------------------------------ --ratio: ingest vs encoding

BASELINE = """
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
from sentence_transformers import SentenceTransformer
from parallel_rag.backends.encoders.embeddings import BUNDLED, resolve_model
model = SentenceTransformer(resolve_model(BUNDLED), device="cpu")
loaded = time.perf_counter(), time.process_time()
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
model.encode([f"{r['title']}\\n{r['text']}".strip() for r in rows], batch_size=32)
done = time.perf_counter(), time.process_time()
print(json.dumps({"load": [loaded[0] - wall, loaded[1] - cpu],
                  "encode": [done[0] - loaded[0], done[1] - loaded[1]]}))
"""
"""Plain sentence-transformers (torch float32, the packaged MiniLM), each abstract once as
title and text, in batches of 32: the baseline issue 35's ratio is taken against."""

VARIANTS: dict[str, tuple[dict | None, list[str]]] = {
    "shipped (fusion fit at the end)": (None, []),
    "neither (no sentence vectors at all)": (
        {"dense": {"passages": {"sentence_weight": 0}}, "generator": {"sentence_vectors": None}},
        ["--no-tune"],
    ),
    "no sentence shard (sentence_weight 0)": (
        {"dense": {"passages": {"sentence_weight": 0}}},
        ["--no-tune"],
    ),
    "no stored generator vectors (sentence_vectors null)": (
        {"generator": {"sentence_vectors": None}},
        ["--no-tune"],
    ),
}
"""Each ingest run: (changes to the embedded defaults, extra CLI flags). The fit is measured
once (first row, a stage of its own); the others skip it so each differs from the shipped row
in the one part it leaves out."""


def variant_config(changes: dict | None) -> dict | None:
    """The embedded defaults with ``changes`` (None: no config file, the defaults as shipped)."""
    if changes is None:
        return None
    dense: dict = {"name": "dense", "backend": "qdrant_edge"}
    if "dense" in changes:
        dense["backend_config"] = changes["dense"]
    config: dict = {"retrievers": [{"name": "lexical", "backend": "bm25"}, dense]}
    if "generator" in changes:
        config["generator"] = changes["generator"]
    return config


def child(command: list[str], cwd: Path) -> tuple[float, float, str]:
    """Run ``command`` in ``cwd``: (wall s, the child's CPU s, its stdout)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, text=True)
    output = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"{command[:4]} failed (status {status}): {output[-400:]}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, output


def ingest_variant(corpus: Path, folder: Path, changes: dict | None, flags: list[str]) -> dict:
    """``parallel-rag ingest --json`` of ``corpus`` into a fresh ``folder``: the process's wall
    and CPU, and the report with its per-stage timings."""
    import yaml

    folder.mkdir(parents=True)
    config = variant_config(changes)
    if config is not None:
        (folder / "parallel-rag.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    command = [sys.executable, "-m", "parallel_rag.studio.cli", "ingest", "--quiet", "--json"]
    wall, cpu, output = child([*command, *flags, str(corpus)], folder)
    return {"wall": wall, "cpu": cpu, "report": json.loads(output)}


def judged_slice(docs: int) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """SciFact's first ``docs`` abstracts, and the test and train queries all of whose judged
    abstracts are among them (a slice whose rankings can be scored)."""
    root = data_root() / "scifact"
    with (root / "corpus.jsonl").open(encoding="utf-8") as corpus:
        rows = [json.loads(line) for _, line in zip(range(docs), corpus, strict=False)]
    kept = {r["_id"] for r in rows}
    qrels: dict[str, dict[str, int]] = {}
    for split in ("test", "train"):
        with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as lines:
            next(lines)
            for line in lines:
                qid, doc, score = line.split()
                qrels.setdefault(qid, {})[doc] = int(score)
    qrels = {q: judged for q, judged in qrels.items() if set(judged) <= kept}
    with (root / "queries.jsonl").open(encoding="utf-8") as lines:
        texts = {r["_id"]: r["text"] for r in map(json.loads, lines)}
    return rows, {q: texts[q] for q in qrels}, qrels


def quality(
    folder: Path, queries: dict[str, str], qrels: dict, answers: int, set_fit_aside: bool = False
) -> dict:
    """nDCG@10 of the fused ranking on the judged queries, and the extractive answers of the
    first ``answers`` queries with their mean latency, through the real graph on the index in
    ``folder`` (a fresh graph: no sentence vector cached from another run). ``set_fit_aside``:
    the fusion fit's record is moved away first, so the graph fuses by the shipped default
    (what the fit buys, on the same stores)."""
    import ir_measures
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.fitted_fusion import fit_path
    from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever
    from parallel_rag.graph.loading import load_config

    config_file = folder / "parallel-rag.yaml"
    config, base_dir = load_config(config_file if config_file.is_file() else None)
    base_dir = folder if not config_file.is_file() else base_dir
    fitted = fit_path(config, base_dir)
    if set_fit_aside and fitted is not None and fitted.is_file():
        fitted.rename(fitted.with_name(fitted.name + ".set-aside"))
    graph = build_graph(config, base_dir=base_dir)
    retriever = ParallelFusionRetriever(graph=graph, top_k=10)
    qids = list(queries)
    fused = retriever.batch([queries[q] for q in qids], config={"max_concurrency": 4})
    run = {}
    for qid, documents in zip(qids, fused, strict=True):
        ranked = list(dict.fromkeys(str(d.metadata["record_id"]) for d in documents))
        run[qid] = {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}
    ndcg = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, run)[ir_measures.nDCG @ 10]
    texts, started = [], time.perf_counter()
    for qid in qids[:answers]:
        texts.append(graph.invoke({"query": queries[qid]})["answer"])
    latency = (time.perf_counter() - started) / max(1, len(texts))
    return {"ndcg": ndcg, "answers": texts, "latency_ms": latency * 1000}


SHIPPED_UNFITTED = "shipped, its fusion fit set aside (the shipped default fusion)"
STAGE_ORDER = ("convert", "chunk", "load encoder", "chunk vectors", "sentence vectors")


def ratio(docs: int, answers: int) -> None:
    """Baseline, each ingest variant, where each run's time went, and what each part buys."""
    rows, queries, qrels = judged_slice(docs)
    work = Path(tempfile.mkdtemp(prefix="ingest-ratio-"))
    try:
        corpus = work / "scifact.jsonl"
        corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        load = os.getloadavg()[0]
        (work / "baseline").mkdir()
        wall, cpu, output = child([sys.executable, "-c", BASELINE, str(corpus)], work / "baseline")
        base = {"wall": wall, "cpu": cpu, **json.loads(output)}
        print(f"baseline: {json.dumps(base)}", file=sys.stderr, flush=True)
        runs = {}
        for n, (name, (changes, flags)) in enumerate(VARIANTS.items()):
            runs[name] = ingest_variant(corpus, work / f"run-{n}", changes, flags)
            print(f"ran {name}: {json.dumps(runs[name])}", file=sys.stderr, flush=True)
        scores = {
            name: quality(work / f"run-{n}", queries, qrels, answers)
            for n, name in enumerate(VARIANTS)
        }
        scores[SHIPPED_UNFITTED] = quality(work / "run-0", queries, qrels, answers, True)
        print_ratio(docs, base, runs, scores, queries, load)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_ratio(docs: int, base: dict, runs: dict, scores: dict, queries: dict, load) -> None:
    shipped = next(iter(runs))
    print(
        f"`python -m bench.ingest_throughput --ratio --docs {docs}`: SciFact's first {docs:,} "
        f"abstracts, one JSON-lines file; {os.cpu_count()} CPUs, load {load:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at the end\n"
    )
    print("| run | wall s | CPU s | wall / baseline | CPU / baseline | chunks | sentences |")
    print("|---|---|---|---|---|---|---|")
    load_w, load_c = base["load"]
    enc_w, enc_c = base["encode"]
    print(
        f"| baseline: sentence-transformers encode, each abstract once (model load "
        f"{load_w:.0f} s, encode {enc_w:.0f} s wall / {enc_c:.0f} s CPU) | {base['wall']:.0f} "
        f"| {base['cpu']:.0f} | 1.00 | 1.00 | | |"
    )
    for name, run in runs.items():
        report = run["report"]
        print(
            f"| ingest, {name} | {run['wall']:.0f} | {run['cpu']:.0f} "
            f"| {run['wall'] / base['wall']:.2f} | {run['cpu'] / base['cpu']:.2f} "
            f"| {report['chunks']:,} | {report['sentences']:,} |"
        )
        if name == shipped and "fusion fit" in report["timings"]:
            fit = report["timings"]["fusion fit"]
            wall, cpu = run["wall"] - fit["wall_s"], run["cpu"] - fit["cpu_s"]
            print(
                f"| ingest, shipped less its fusion fit stage (what `--no-tune` leaves) "
                f"| {wall:.0f} | {cpu:.0f} | {wall / base['wall']:.2f} "
                f"| {cpu / base['cpu']:.2f} | | |"
            )
    names = list(runs)
    stages = list(STAGE_ORDER)
    for run in runs.values():
        stages += [s for s in run["report"]["timings"] if s not in stages]
    print("\nWhere the time went (each stage's wall s / CPU s, from `ingest --json`):\n")
    print("| stage | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for stage in stages:
        cells = []
        for name in names:
            entry = runs[name]["report"]["timings"].get(stage)
            cells.append(f"{entry['wall_s']:.1f} / {entry['cpu_s']:.1f}" if entry else "-")
        print(f"| {stage} | " + " | ".join(cells) + " |")
    cells = [f"{r['wall'] - r['report']['timings']['total']['wall_s']:.1f}" for r in runs.values()]
    print("| process start, imports (wall) | " + " | ".join(cells) + " |")
    print(
        f"\nWhat each part buys ({len(queries)} SciFact queries whose judged abstracts are all "
        f"among the {docs:,} ingested; answers through the real "
        "graph, a fresh graph per run):\n"
    )
    print("| run | nDCG@10 | answer latency ms (mean) | answers as the unfitted shipped run's |")
    print("|---|---|---|---|")
    reference = scores[SHIPPED_UNFITTED if SHIPPED_UNFITTED in scores else shipped]["answers"]
    for name, score in scores.items():
        same = sum(a == b for a, b in zip(score["answers"], reference, strict=True))
        print(
            f"| {name} | {score['ndcg']:.4f} | {score['latency_ms']:.0f} "
            f"| {same} of {len(reference)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes, in documents")
    parser.add_argument("--shard", type=int, default=500, help="documents per JSON-lines file")
    parser.add_argument(
        "--ratio",
        action="store_true",
        help="ingest against plain sentence-transformers encoding, with each stage's time and "
        "what each optional part buys (issue 50)",
    )
    parser.add_argument("--docs", type=int, default=1500, help="--ratio: SciFact abstracts")
    parser.add_argument("--answers", type=int, default=40, help="--ratio: questions answered")
    args = parser.parse_args()
    if args.ratio:
        ratio(args.docs, args.answers)
        return
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
