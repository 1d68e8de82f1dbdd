"""``python -m bench.generation_latency``: the extractive generator's time per request on
evidence it has never seen, with sentence vectors stored at ingest and without them.

1. Collection: the HotpotQA dev500 paragraphs that are the context of the chosen questions
   (default 101-160; 1-100 are for tuning), about ten per question, written as one JSONL file
   under ``bench/out/generation`` (``--docs all``: all 4,858 paragraphs).
2. Ingest cost: the example corpus and that collection are ingested with the embedded defaults
   (BM25 + Qdrant Edge, packaged MiniLM), once with ``generator.sentence_vectors`` null and
   once with the default store. The example corpus is ingested twice from scratch; the
   HotpotQA collection without the store, then again with it into the same directory, where
   every index is already up to date and only the sentence vectors are computed:
   with = without + that second run.
3. Evidence: each question asked through ``build_graph()`` over those indexes; its fused
   top-k documents (``top_k`` 10).
4. Generation: for each question, a new ``ExtractiveGenerator`` (as ``make_generator`` builds
   it, so its sentence LRU is empty: none of the evidence was seen by it) answers the fused
   documents once reading the stored vectors and once embedding every sentence with the
   model, in alternating order. The query vector is computed before either (the graph's dense
   branch has always embedded it by the time the generator runs; its cost is shown apart).
   Wall and process CPU time per request; sentences the model embedded per request.
5. Answers: identical (the same text, the same citations) in both modes, and answer recall
   and citation support from ``bench.answers`` for each.

Writes ``bench/GENERATION-RESULTS.md`` (``--out`` elsewhere). Work files live under
``bench/out/generation`` (``--fresh`` ingests again).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LANGSMITH_TRACING", "false")

from bench.answers import git_head, parse_range  # noqa: E402
from bench.data import REPO_ROOT, DataMissing, load_hotpotqa, require  # noqa: E402
from bench.measure import pct  # noqa: E402
from bench.scoring import score  # noqa: E402

WORK = REPO_ROOT / "bench" / "out" / "generation"
RESULTS_MD = REPO_ROOT / "bench" / "GENERATION-RESULTS.md"
EXAMPLE_CORPUS = REPO_ROOT / "examples" / "corpus"


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def config(stored: bool):
    from parallel_rag.graph.loading import default_config_dict, parse_config

    data = default_config_dict()
    if not stored:
        data["generator"] = {"sentence_vectors": None}
    return parse_config(data, source="embedded defaults")


def timed_ingest(paths: list[Path], stored: bool, base_dir: Path) -> dict:
    from parallel_rag.studio.ingestion import ingest_paths

    wall, cpu = time.perf_counter(), time.process_time()
    report = ingest_paths(paths, config(stored), base_dir, progress=False)
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "chunks": report.chunks,
        "embedded_chunks": report.embedded,
        "sentences": report.sentences,
    }


def collection(data, questions: list[dict], docs: str) -> Path:
    """The paragraphs to ingest, as a JSONL file (``_id``, ``title``, ``text``)."""
    if docs == "all":
        ids = list(data.corpus)
    else:
        ids = list(dict.fromkeys(d for q in questions for d in q["context_doc_ids"]))
    path = WORK / f"collection-{len(ids)}.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for doc_id in ids:
            doc = data.corpus[doc_id]
            record = {"_id": doc_id, "title": doc["title"], "text": doc["text"]}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def ingest_costs(hotpot_corpus: Path, fresh: bool) -> dict:
    """Ingest wall/CPU with and without stored sentence vectors (kept in a JSON file while
    the collection is the same: ingesting takes minutes)."""
    marker = WORK / "ingest.json"
    if marker.is_file() and not fresh and (WORK / "hotpot" / ".parallel-rag").is_dir():
        costs = json.loads(marker.read_text())
        if costs.get("collection") == hotpot_corpus.name:
            return costs
    for name in ("examples-off", "examples-on", "hotpot"):
        shutil.rmtree(WORK / name, ignore_errors=True)
    docs = sum(1 for line in hotpot_corpus.open(encoding="utf-8") if line.strip())
    costs: dict = {"collection": hotpot_corpus.name, "docs": docs}
    log("[ingest] examples/corpus without stored sentence vectors")
    costs["examples_off"] = timed_ingest([EXAMPLE_CORPUS], False, WORK / "examples-off")
    log("[ingest] examples/corpus with them")
    costs["examples_on"] = timed_ingest([EXAMPLE_CORPUS], True, WORK / "examples-on")
    log("[ingest] HotpotQA paragraphs without stored sentence vectors")
    costs["hotpot_off"] = timed_ingest([hotpot_corpus], False, WORK / "hotpot")
    log("[ingest] HotpotQA paragraphs again with them (indexes up to date: sentences only)")
    costs["hotpot_sentences"] = timed_ingest([hotpot_corpus], True, WORK / "hotpot")
    store = WORK / "hotpot" / ".parallel-rag" / "sentence_vectors.sqlite3"
    costs["store_mb"] = sum(
        p.stat().st_size for p in store.parent.glob(store.name + "*") if p.is_file()
    ) / (1 << 20)
    marker.write_text(json.dumps(costs, indent=1))
    return costs


def fused_documents(questions: list[dict], top_k: int) -> list[dict]:
    """Each question's fused documents from the graph over the HotpotQA indexes (cached)."""
    from parallel_rag.graph.builder import build_graph

    ids = [q["_id"] for q in questions]
    cache = WORK / f"asked-{ids[0]}-{ids[-1]}-{len(ids)}-k{top_k}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    graph = build_graph(config(True), base_dir=WORK / "hotpot")
    rows = []
    for question in questions:
        result = graph.invoke({"query": question["question"], "top_k": top_k})
        docs = [
            {"id": d["id"], "content": d["content"], "metadata": d["metadata"]}
            for d in result["documents"]
        ]
        rows.append(
            {
                "id": question["_id"],
                "query": question["question"],
                "documents": docs,
                "retrieved": [str(d["metadata"]["record_id"]) for d in docs],
            }
        )
    cache.write_text(json.dumps(rows))
    return rows


class EmbeddedTexts:
    """Counts the texts the shared model embeds as documents."""

    def __init__(self, model):
        self.count = 0
        real = model.embed_documents

        def counting(texts):
            self.count += len(texts)
            return real(texts)

        model.embed_documents = counting


def measure(asked: list[dict]) -> tuple[dict, dict, dict]:
    """Per mode: per-request wall/CPU ms and embedded sentences, the answer rows, and the
    query encode times."""
    from parallel_rag.backends.encoders.embeddings import load_embeddings
    from parallel_rag.graph.components import make_generator

    model = load_embeddings()
    counter = EmbeddedTexts(model)
    query_ms = []
    encoder = getattr(model, "inner", model)  # past the shared query cache: a real encode
    for row in asked:
        started = time.perf_counter()
        encoder.embed_query(row["query"])
        query_ms.append((time.perf_counter() - started) * 1000)
        model.embed_query(row["query"])  # what the dense branch has done before generation
    modes = {"stored": WORK / "hotpot", "model": None}
    timings = {mode: {"wall": [], "cpu": [], "embedded": []} for mode in modes}
    rows = {mode: [] for mode in modes}
    for i, row in enumerate(asked):
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        for mode in order:
            settings = config(mode == "stored")
            generator = make_generator(
                settings.generator, None, settings.embeddings, base_dir=modes[mode]
            )
            before = counter.count
            wall, cpu = time.perf_counter(), time.process_time()
            generated = generator.generate(row["query"], row["documents"])
            timings[mode]["wall"].append((time.perf_counter() - wall) * 1000)
            timings[mode]["cpu"].append((time.process_time() - cpu) * 1000)
            timings[mode]["embedded"].append(counter.count - before)
            rows[mode].append(
                {
                    "id": row["id"],
                    "retrieved": row["retrieved"],
                    "answer": generated.answer,
                    "numbers": generated.cited_numbers,
                    "cited": [row["retrieved"][n - 1] for n in generated.cited_numbers],
                }
            )
        if (i + 1) % 20 == 0:
            log(f"[generate] {i + 1}/{len(asked)}")
    return timings, rows, {"query_ms": query_ms}


def versions() -> str:
    from importlib.metadata import version

    names = ["torch", "sentence-transformers", "transformers", "numpy", "langgraph"]
    parts = [f"Python {platform.python_version()}", f"SQLite {sqlite3.sqlite_version}"]
    parts += [f"{n} {version(n)}" for n in names]
    return ", ".join(parts)


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q):,.1f}"


def write_markdown(out: Path, text: str) -> None:
    out.write_text(text, encoding="utf-8")
    log(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", default="101-160", help="1-based range (default 101-160)")
    parser.add_argument(
        "--docs", choices=["context", "all"], default="context", help="paragraphs to ingest"
    )
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--fresh", action="store_true", help="ingest (and retrieve) again")
    parser.add_argument("--out", type=Path, default=RESULTS_MD, help="markdown file to write")
    args = parser.parse_args(argv)
    try:
        data = load_hotpotqa()
        require("hotpotqa-dev500", ["corpus.jsonl"])
    except DataMissing as error:
        print(error, file=sys.stderr)
        return 2
    load_start = os.getloadavg()
    first, last = parse_range(args.questions)
    questions = data.questions[first - 1 : last]
    WORK.mkdir(parents=True, exist_ok=True)
    from parallel_rag.backends.encoders.embeddings import load_embeddings

    load_embeddings().embed_query("warm-up")  # model load is not ingest or generation time
    costs = ingest_costs(collection(data, questions, args.docs), args.fresh)
    log(f"[ask] questions {first}-{last} through build_graph() (top_k {args.top_k})")
    asked = fused_documents(questions, args.top_k)
    timings, rows, extra = measure(asked)
    load_end = os.getloadavg()

    by_id = {q["_id"]: q for q in questions}
    same = sum(
        a["answer"] == b["answer"] and a["numbers"] == b["numbers"]
        for a, b in zip(rows["stored"], rows["model"], strict=True)
    )
    quality = {mode: score(rows[mode], by_id, data.corpus) for mode in rows}
    from parallel_rag.nodes.generate.sentences import split_sentences

    sentences = [sum(len(split_sentences(d["content"])) for d in r["documents"]) for r in asked]
    labels = {
        "stored": "stored sentence vectors (default)",
        "model": "embedding every sentence (`sentence_vectors: null`)",
    }
    lines = [
        "# Extractive generation: stored sentence vectors vs embedding per request",
        "",
        f"Command: `nice -n 10 python -m bench.generation_latency --questions {args.questions} "
        f"--docs {args.docs}`"
        f" (HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false), commit {git_head()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"Machine: {os.cpu_count()} cores shared with other jobs; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.1f}' for x in load_start)} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in load_end)} at the end.",
        f"Versions: {versions()}.",
        "",
        f"## Generation per request (HotpotQA dev500 questions {first}-{last}, "
        f"{len(asked)} requests, fused top-{args.top_k})",
        "",
        "A new generator per request (empty sentence LRU: evidence never seen by it); the query "
        "vector already computed, as the dense branch leaves it. Both modes on the same "
        "documents, interleaved.",
        "",
        "| mode | wall p50 ms | wall p95 ms | CPU p50 ms | CPU p95 ms | sentences embedded "
        "per request (mean) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, label in labels.items():
        t = timings[mode]
        lines.append(
            f"| {label} | {ms(t['wall'], 50)} | {ms(t['wall'], 95)} | {ms(t['cpu'], 50)} | "
            f"{ms(t['cpu'], 95)} | {statistics.mean(t['embedded']):.1f} |"
        )
    q = extra["query_ms"]
    lines += [
        "",
        f"Query encode (once per request, shared with the dense branch; not in the rows above): "
        f"p50 {ms(q, 50)} ms, p95 {ms(q, 95)} ms wall. Evidence: "
        f"{statistics.mean(len(r['documents']) for r in asked):.1f} documents, about "
        f"{statistics.mean(sentences):.0f} sentences per request.",
        "",
        "## Answers",
        "",
        f"Identical answers (same text, same citations) in both modes: **{same} of {len(asked)}**.",
        "",
        "| mode | answer recall | retrieval ceiling | citation support | citation precision | "
        "median words |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, label in labels.items():
        s = quality[mode]
        lines.append(
            f"| {label} | {s['recall']:.3f} | {s['ceiling']:.3f} | "
            f"{s['citation_support']:.3f} | {s['citation_precision']:.3f} | "
            f"{s['median_words']:.0f} |"
        )
    ex_off, ex_on = costs["examples_off"], costs["examples_on"]
    hp_off, hp_sent = costs["hotpot_off"], costs["hotpot_sentences"]
    lines += [
        "",
        "## Ingest cost",
        "",
        "Embedded defaults (BM25 + Qdrant Edge, packaged MiniLM), model already loaded. "
        "HotpotQA: ingested without the store, then again with it into the same directory "
        "(indexes up to date, so the second run computes only the sentence vectors); "
        "with = the sum.",
        "",
        "| collection | chunks | sentences stored | without: wall s | without: CPU s | "
        "with: wall s | with: CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| examples/corpus | {ex_on['chunks']} | {ex_on['sentences']:,} | "
        f"{ex_off['wall_s']:.1f} | {ex_off['cpu_s']:.1f} | {ex_on['wall_s']:.1f} | "
        f"{ex_on['cpu_s']:.1f} |",
        f"| HotpotQA dev500 paragraphs ({costs['docs']:,}, `--docs {args.docs}`) | "
        f"{hp_off['chunks']:,} | "
        f"{hp_sent['sentences']:,} | {hp_off['wall_s']:.1f} | {hp_off['cpu_s']:.1f} | "
        f"{hp_off['wall_s'] + hp_sent['wall_s']:.1f} | {hp_off['cpu_s'] + hp_sent['cpu_s']:.1f} |",
        "",
        f"Store size for the HotpotQA paragraphs: {costs['store_mb']:.1f} MB "
        "(`.parallel-rag/sentence_vectors.sqlite3`, WAL files included).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        findings = ""
        if args.out.is_file() and "## Findings" in args.out.read_text():
            findings = args.out.read_text()[args.out.read_text().index("## Findings") :]
        write_markdown(args.out, text + ("\n" + findings if findings else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
