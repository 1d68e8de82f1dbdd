"""The benchmark harness: ``python -m bench`` (full, manual) or ``python -m bench --smoke`` (CI).

Quality (SciFact, HotpotQA dev500, and Vaswani, which nothing was tuned on), answers (the
extractive generator's answer recall, citation support and length on HotpotQA,
``bench.answers``), latency (fan-out, overhead, per node), scale (BM25 engines, embedded vector
stores) and ingestion, in one process plus one worker process per scale measurement, at the
shipped defaults (BM25 + Qdrant Edge over passages, the default fusion) beside the previous
default and the baselines; then the bars of one deployment past one machine, each by its
focused script's functions: Milvus full text beside bm25s (``fulltext``), the context cache in
Redis beside the in-process one (``cache``), ``serve --workers 2`` beside one worker at rising
client concurrency (``workers``). Writes ``RESULTS.md`` and PNG plots into ``bench/`` for a full run
(its results JSON under ``bench/out/``), into ``bench/out/smoke/`` for ``--smoke`` (so CI never
overwrites the committed results).

The evaluation collections are read from ``../shared/data`` (``$PARALLEL_RAG_DATA``); without
them the harness stops with a message and exit status 2. Corpus and query vectors are cached
under ``bench/out/cache`` (first full run: ~10-30 min of encoding on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LANGSMITH_TRACING", "false")

from bench.data import (  # noqa: E402
    REPO_ROOT,
    DataMissing,
    HotpotQA,
    data_root,
    doc_text,
    load_hotpotqa,
    load_scifact,
    load_vaswani,
    smoke_hotpotqa,
    smoke_scifact,
)
from bench.measure import INLINE_ENV, process_cpu_seconds  # noqa: E402

BENCH_DIR = REPO_ROOT / "bench"
OUT_DIR = BENCH_DIR / "out"
CACHE_DIR = OUT_DIR / "cache"
SECTIONS = (
    "quality",
    "answers",
    "latency",
    "scale",
    "stores",
    "ingest",
    "fulltext",
    "cache",
    "workers",
)
BEYOND = ("fulltext", "cache", "workers")
"""The sections of issue 36's bars (one deployment past one machine), in ``results["beyond"]``."""
VERSIONED = (
    "parallel-rag",
    "langgraph",
    "langchain-core",
    "langchain-classic",
    "qdrant-edge-py",
    "qdrant-client",
    "pymilvus",
    "milvus-lite",
    "bm25s",
    "rank-bm25",
    "sentence-transformers",
    "transformers",
    "torch",
    "onnxruntime",
    "numpy",
    "ir-measures",
)


def log(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} {message}", flush=True)


def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        total_kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{total_kb / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "load average at start (1/5/15 min)": load,
        "python": platform.python_version(),
    }


def versions() -> dict[str, str]:
    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


# -- the run ---------------------------------------------------------------------------------------


class Harness:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.smoke = args.smoke
        self.out_dir = (
            Path(args.out) if args.out else (OUT_DIR / "smoke" if self.smoke else BENCH_DIR)
        )
        self.work = OUT_DIR / ("smoke-work" if self.smoke else "work")
        self.results: dict[str, Any] = {"quality": {}, "latency": {}, "scale": {}}
        self.notes: list[str] = []
        self.errors: dict[str, str] = {}

    def section(self, name: str, fn, *a, **kw) -> Any:
        log(f"== {name}")
        started, cpu_started = time.perf_counter(), process_cpu_seconds()
        try:
            value = fn(*a, **kw)
        except Exception as error:  # one failed section must not lose the others
            traceback.print_exc()
            self.errors[name] = f"{type(error).__name__}: {error}"[:400]
            self.notes.append(f"**{name} failed** in this run: {self.errors[name]}")
            return None
        cpu = process_cpu_seconds() - cpu_started
        log(f"== {name} done in {time.perf_counter() - started:.0f}s ({cpu:.0f}s CPU)")
        return value

    def run(self) -> int:
        started = time.perf_counter()
        load_at_start = os.getloadavg()[1]
        wanted = set(self.args.sections.split(",")) if self.args.sections else set(SECTIONS)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        log(f"bench: data from {data_root()}, writing to {self.out_dir}")
        sci_test, sci_train = load_scifact("test"), load_scifact("train")
        hotpot = load_hotpotqa()
        vaswani = load_vaswani()
        if self.smoke:
            sci_test, sci_train = smoke_scifact(sci_test, sci_train)
            hotpot = smoke_hotpotqa(hotpot)
            vaswani, _ = smoke_scifact(vaswani, vaswani)
            os.environ[INLINE_ENV] = "1"  # scale tasks in-process: no worker start-up cost
            self.notes.append(
                "Smoke run: tiny subsets, scale tasks in the harness process (memory figures are "
                "the whole harness's). Only the full run's figures mean anything."
            )
        meta = {
            "smoke": self.smoke,
            "command": "python -m bench " + " ".join(sys.argv[1:]),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "versions": versions(),
        }

        if "answers" in wanted:
            self.results["answers"] = self.section("answers", self._answers, hotpot)
        if wanted & {"quality", "latency"}:
            self.quality_and_latency(wanted, sci_test, sci_train, hotpot, vaswani)
        if "latency" in wanted:
            fan = self.results["latency"]
            if self.smoke:
                fan["fanout"] = self.section("fan-out", self._fanout, delay_ms=20, reps=3)
            else:
                fan["fanout"] = self.section(
                    "fan-out", self._fanout, delay_ms=self.args.delay_ms, reps=self.args.reps
                )
        if "scale" in wanted:
            self.scale()
        if "stores" in wanted:
            self.stores()
        if "ingest" in wanted:
            from bench.scale import ingestion

            docs, rounds = (3, 1) if self.smoke else (self.args.ingest_docs, 2)
            self.results["ingest"] = self.section(
                "ingestion", ingestion, docs, self.work / "ingest", rounds=rounds, log=log
            )

        if wanted & set(BEYOND):
            self.beyond_one_machine(wanted)

        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        meta["machine"]["load average at end (1/5/15 min)"] = load
        meta["duration_min"] = (time.perf_counter() - started) / 60
        busy = max(os.getloadavg()[1], load_at_start)
        if busy > (os.cpu_count() or 1):
            self.notes.insert(
                0,
                f"The machine was shared while this ran (5-min load average up to {busy:.1f} "
                f"on {os.cpu_count()} cores: other people's test suites). Wall-clock times are "
                "inflated and noisy accordingly; the CPU-time columns (this process's CPU per "
                "query) are the contention-robust figures, and ratios measured round-robin "
                "(every method under the same load) are more stable than absolute times.",
            )
        meta["notes"] = self.notes
        meta["errors"] = self.errors
        meta["sections"] = {
            name: {
                "date": meta["date"],
                "command": meta["command"],
                "load": meta["machine"]["load average at start (1/5/15 min)"],
            }
            for name in SECTIONS
            if name in wanted
        }
        self.results["meta"] = meta
        if not self.smoke and wanted != set(SECTIONS) and self.args.out is None:
            self.carry_over(wanted)
        self.write()
        log(f"bench: done in {meta['duration_min']:.1f} min; {len(self.errors)} section(s) failed")
        return 1 if self.errors else 0

    def carry_over(self, wanted: set[str]) -> None:
        """A run of some sections keeps the other sections of the previous full-mode results
        (``bench/out/results.json``), each labelled with the run that measured it."""
        previous_file = results_file(smoke=False, out=None)
        if not previous_file.is_file():
            return
        previous = json.loads(previous_file.read_text())
        old_meta = previous.get("meta", {})
        old_sections = old_meta.get("sections") or {
            name: {
                "date": old_meta.get("date", "?"),
                "command": old_meta.get("command", "?"),
                "load": old_meta.get("machine", {}).get("load average at start (1/5/15 min)", "?"),
            }
            for name in SECTIONS
        }
        keys = {
            "quality": [("quality",)],
            "latency": [("latency",)],
            "scale": [("scale", "bm25"), ("scale", "corpus_note"), ("scale", "skipped")],
            "stores": [("scale", "stores"), ("scale", "stores_note")],
            "ingest": [("ingest",)],
            "answers": [("answers",)],
            **{name: [("beyond", name)] for name in BEYOND},
        }
        meta = self.results["meta"]
        for name in SECTIONS:
            if name in wanted or name not in old_sections:
                continue
            carried = False
            for path in keys[name]:
                source, target = previous, self.results
                for part in path[:-1]:
                    source = source.get(part, {})
                    target = target.setdefault(part, {})
                if path[-1] in source:
                    target[path[-1]] = source[path[-1]]
                    carried = True
            if carried:
                meta["sections"][name] = {**old_sections[name], "carried": True}
                meta["notes"].append(
                    f"Section `{name}` comes from an earlier run ({old_sections[name]['date']}, "
                    f"`{old_sections[name]['command']}`), not re-measured by this one."
                )

    def _answers(self, hotpot: HotpotQA) -> dict[str, Any]:
        """The answer harness (``bench.answers``) on the tuning questions and the report
        questions: the checkout's extractive generator beside the one the answer bars were set
        against, on the fused documents ``build_graph()`` returns at the embedded defaults."""
        from bench import answers

        tune = 6 if self.smoke else answers.TUNE_QUESTIONS
        # the full run shares ``bench.answers``' own index and fused documents
        index_dir = self.work / "answers" if self.smoke else answers.WORK
        ranges = [(1, tune), (tune + 1, len(hotpot.questions))]
        measured = [
            answers.measure(
                hotpot,
                first,
                last,
                index_dir=index_dir / "hotpotqa",
                llm_questions=self.args.answer_llm_questions,
            )
            for first, last in ranges
        ]
        return {"ranges": measured}

    def _fanout(self, delay_ms: float, reps: int):
        from bench.latency import fanout

        return fanout((2, 3, 4), delay_ms=delay_ms, reps=reps, log=log)

    def quality_and_latency(self, wanted, sci_test, sci_train, hotpot: HotpotQA, vaswani) -> None:
        from bench import latency, quality
        from bench.embedding_cache import EmbeddingCache, installed, warm
        from bench.pipelines import edge_reads_the_cache, pipeline

        depth = 20 if self.smoke else 100
        cache = EmbeddingCache(CACHE_DIR)
        with installed(cache) as cached, edge_reads_the_cache(cached):
            queries = [*sci_test.queries.values(), *sci_train.queries.values()]
            queries += [q["question"] for q in hotpot.questions]
            queries += list(vaswani.queries.values()) if "quality" in wanted else []
            warm(cache, queries, "queries", log)
            warm(cache, [doc_text(d) for d in hotpot.corpus.values()], "hotpotqa corpus", log)
            warm(cache, [doc_text(d) for d in sci_test.corpus.values()], "scifact corpus", log)
            if "quality" in wanted:
                warm(cache, [doc_text(d) for d in vaswani.corpus.values()], "vaswani corpus", log)
            sci_work = self.work / "scifact"
            sci_config = self.section(
                "scifact indexes",
                quality.build_indexes,
                sci_test.corpus,
                sci_work,
                "scifact",
                depth,
            )
            if "quality" in wanted and sci_config is not None:
                self.results["quality"]["scifact"] = self.section(
                    "quality: scifact",
                    quality.scifact,
                    sci_test,
                    sci_train,
                    cache,
                    sci_work,
                    sci_config,
                    depth=depth,
                    rerank=not self.args.no_rerank,
                    log=log,
                )
                self.results["quality"]["bm25_engines"] = self.section(
                    "quality: bm25 engines", quality.bm25_engine_table, sci_test, log=log
                )
                self.results["quality"]["hotpotqa"] = self.section(
                    "quality: hotpotqa", self._hotpot, hotpot, cache, depth
                )
                self.results["quality"]["vaswani"] = self.section(
                    "quality: vaswani (not tuned on)", self._untuned, vaswani, "vaswani", depth
                )
        log(
            f"[embed] cache: {cache.hits} hits, {cache.misses} misses "
            f"({cache.encode_seconds:.0f}s encoding in this run)"
        )
        if "latency" in wanted and sci_config is not None:
            # the shipped branches with the product's own query encoder (no embedding cache):
            # every overhead call asks a new query text, so each one encodes for real
            from parallel_rag.graph.builder import build_graph
            from parallel_rag.graph.loading import parse_config
            from parallel_rag.studio.evaluation import single_retrievers

            from bench.orchestration import DEPTH

            branches = single_retrievers(
                parse_config(pipeline(sci_work, "scifact", depth=DEPTH)), sci_work
            )
            n = 8 if self.smoke else self.args.overhead_queries
            over = self.section(
                "overhead",
                latency.overhead,
                branches,
                list(sci_test.queries.values())[:n],
                log=log,
            )
            if over is not None:
                over["docs"] = f"{len(sci_test.corpus):,}"
            self.results["latency"]["overhead"] = over

            # real model calls: the per-node figures include query and sentence encoding
            config = pipeline(sci_work, "scifact", depth=10)
            config.pop("generator")  # the default extractive generator (embedding selection)
            n = 2 if self.smoke else self.args.node_queries
            self.results["latency"]["per_node"] = self.section(
                "per-node timings",
                latency.per_node,
                build_graph(config, base_dir=sci_work),
                list(sci_test.queries.values())[:n],
                log=log,
            )

    def _untuned(self, collection, name: str, depth: int):
        from bench import quality

        work = self.work / name
        config = quality.build_indexes(collection.corpus, work, name, depth)
        return quality.untuned(collection, name, work, config, depth=depth, log=log)

    def _hotpot(self, hotpot: HotpotQA, cache, depth: int):
        from bench import quality, rewriting
        from bench.offline_llm import llama_server, offline_llm_available

        work = self.work / "hotpotqa"
        config = quality.build_indexes(hotpot.corpus, work, "hotpotqa", depth)
        tune = 6 if self.smoke else quality.HOTPOT_TUNE
        measured = self.args.rewriter_questions != 0  # prf needs no model: always, unless 0
        why_not = None  # why the chat-model kinds are not measured
        base_url = self.args.llm
        if self.smoke or not measured:
            why_not = "not run in this mode"
        elif base_url is None:
            why_not = offline_llm_available()
        hook = None
        server = None
        if measured:
            if why_not is None and base_url is None:
                server = llama_server(OUT_DIR / "llama-server.log")
                base_url = server.__enter__()
            llm_url = base_url if why_not is None else None

            def hook(**kw):
                return rewriting.rewriter_rows(
                    **kw, base_url=llm_url, limit=self.args.rewriter_questions, depth=depth
                )

        try:
            result = quality.hotpotqa(
                hotpot,
                cache,
                work,
                config,
                depth=depth,
                tune_questions=tune,
                rewriters=hook,
                log=log,
            )
        finally:
            if server is not None:
                server.__exit__(None, None, None)
        questions = self.args.rewriter_questions
        if why_not is not None:
            result["rewriter_note"] = (
                "Rewriter kinds that need a chat model (multi_query, decompose, hyde) were not "
                f"measured: {why_not}. The offline one is SmolLM2-135M on llama-cpp-python's "
                "server (`python -m bench --llm URL` uses any OpenAI-compatible endpoint)."
                + (
                    f" The model-free `prf` rewriter was, on the first {questions} report "
                    "questions beside the no-rewriter row."
                    if measured
                    else ""
                )
            )
            self.notes.append(result["rewriter_note"])
        else:
            result["rewriter_note"] = (
                "Rewriter rows: `prf` (no model, its default `fb_docs` and `fb_terms`), and "
                "SmolLM2-135M-Instruct (Q4_1, llama-cpp-python), temperature 0, 3 queries per "
                f"rewrite, on the first {questions} report questions only (seconds per rewrite "
                "on this CPU); compare them with the no-rewriter row on the same questions."
            )
        return result

    def scale(self) -> None:
        from bench.scale import bm25_scale

        sizes = (
            [2000]
            if self.smoke
            else [s for s in (5000, 100_000, 1_000_000) if s <= self.args.max_docs]
        )
        engines = ("bm25s", "rank_bm25")
        rows = (
            self.section(
                "scale: bm25",
                bm25_scale,
                [s for s in sizes if s < 1_000_000],
                engines,
                queries=10 if self.smoke else 100,
                log=log,
            )
            or []
        )
        if 1_000_000 in sizes:
            rows += (
                self.section(
                    "scale: bm25 1M",
                    bm25_scale,
                    [1_000_000],
                    ("bm25s",),
                    queries=100,
                    timeout=2400,
                    log=log,
                )
                or []
            )
        self.results["scale"]["bm25"] = rows
        self.results["scale"]["corpus_note"] = (
            "Synthetic corpus: each document is 3 to 8 sentences drawn at random (seeded) from "
            "the sentences of all 5,183 SciFact abstracts (split after `.`, `?`, `!` before a "
            "capital or digit), so lengths and vocabulary match SciFact while topics are mixed. "
            "Queries: SciFact test claims (rank-bm25 gets 20 at 100k: it scores every document "
            "in Python). Build = analysis (English stopwords + Snowball) + the engine's "
            "statistics, in a fresh process; index MB = RSS growth during the build."
        )
        if not self.smoke and self.args.max_docs < 1_000_000:
            hundred = next(
                (
                    r
                    for r in rows
                    if r.get("docs") == 100_000 and r.get("engine") == "bm25s" and "error" not in r
                ),
                None,
            )
            estimate = (
                f" (about {10 * hundred['build_s'] / 60:.0f} min to build here, "
                "extrapolated from 100k)"
                if hundred
                else ""
            )
            self.results["scale"]["skipped"] = (
                f"1M documents: skipped in this run to keep it within its time budget{estimate}; "
                "`python -m bench --sections scale --max-docs 1000000` runs it (bm25s only)."
            )
            self.notes.append(self.results["scale"]["skipped"])

    def stores(self) -> None:
        from bench.scale import STORES, edge_defaults, store_scale

        # Qdrant local mode writes about 40 vectors/s to disk: a small smoke size
        sizes = [300] if self.smoke else [int(s) for s in self.args.store_sizes.split(",")]
        self.results["scale"]["stores"] = (
            self.section(
                "scale: vector stores",
                store_scale,
                sizes,
                self.work / "stores",
                queries=10 if self.smoke else self.args.store_queries,
                log=log,
            )
            or []
        )
        edge = edge_defaults()
        self.results["scale"]["stores_note"] = (
            f"The embedded dense stores ({', '.join(STORES)}) on the same clustered synthetic "
            "384-d unit vectors (1,000 random cluster centres plus Gaussian noise, so "
            "neighbourhoods have the structure of encoded text; on pure random vectors HNSW "
            "recall collapses, which says nothing about real corpora), measured by "
            "`bench/ann_stores.py`'s `run_one`, each (store, size) in its own process. Query = "
            "the bundled all-MiniLM-L6-v2 encoding a new question (the shipped query encoder) "
            "plus the store's top-10 search; recall@10 against exact numpy search over the same "
            "vectors; upsert excludes encoding. Qdrant Edge runs at its shipped settings (m "
            f"{edge['m']}, ef_construct {edge['ef_construct']}, hnsw_ef {edge['hnsw_ef']}); "
            "Qdrant local mode is a brute-force scan (its upsert rate is timed on the first "
            "5,000 vectors written to disk) and Milvus Lite uses its own index defaults. The 1M "
            "rows (Qdrant Edge alone: the others take hours to fill) are not re-measured here: "
            "they stay in `bench/ANN-RESULTS.md` (`python -m bench.ann_stores --sizes 1000000 "
            "--stores edge --hnsw-ef 256`)."
        )

    def beyond_one_machine(self, wanted: set[str]) -> None:
        """Issue 36's bars, each measured by its focused script's own functions: Milvus full
        text beside bm25s on the three collections, the context cache in Redis beside the
        in-process one, and ``serve --workers 2`` beside one worker on the load harness."""
        beyond = self.results.setdefault("beyond", {})
        for name, measure in (
            ("fulltext", self._fulltext),
            ("cache", self._shared_cache),
            ("workers", self._workers),
        ):
            if name in wanted:
                beyond[name] = self.section(f"beyond one machine: {name}", measure)

    def _fulltext(self) -> dict[str, Any]:
        from bench import milvus_fulltext

        measured = {}
        for name in ("scifact", "hotpotqa", "vaswani"):
            collection = milvus_fulltext.load(name)
            if self.smoke:
                collection, _ = smoke_scifact(collection, collection, queries=6, distractors=20)
            measured[name] = milvus_fulltext.run(name, collection=collection, log=log)
            print(milvus_fulltext.table(measured[name]), flush=True)
        return {"collections": measured, "stemmer_probe": milvus_fulltext.stemmer_probe(log)}

    def _shared_cache(self) -> dict[str, Any]:
        from bench import shared_cache

        sizes = {"requests": 200, "questions": 50, "repeats": 200} if self.smoke else {}
        result = shared_cache.measure(**sizes)
        print(shared_cache.tables(result), flush=True)
        return result

    def _workers(self) -> dict[str, Any]:
        """One worker, then two, each driven at rising client concurrency on the load harness
        (the example corpus at the embedded defaults, ingested once into the work folder)."""
        from bench import load

        if self.smoke:
            argv = ["--requests", "16", "--warmup", "4", "--workdir", str(self.work / "load")]
            concurrencies = [4]
        else:
            argv = ["--requests", str(self.args.load_requests), "--workdir", str(OUT_DIR / "load")]
            concurrencies = [int(c) for c in self.args.load_concurrency.split(",")]
        rows = [row for workers in (1, 2) for row in load.sweep(argv, workers, concurrencies)]
        print(load.sweep_table(rows), flush=True)
        return {"rows": rows, "requests": int(argv[1])}

    def write(self) -> None:
        from bench.report import plot, render

        self.out_dir.mkdir(parents=True, exist_ok=True)
        results_file(self.smoke, self.args.out).write_text(
            json.dumps(self.results, indent=2, default=str)
        )
        plots = {}
        try:
            plots = plot(self.results, self.out_dir)
        except Exception:  # a plotting problem must not lose the tables
            traceback.print_exc()
            self.notes.append("plots could not be drawn (see the log)")
        (self.out_dir / "RESULTS.md").write_text(render(self.results, self.out_dir, plots))
        log(f"bench: wrote {self.out_dir / 'RESULTS.md'} and {len(plots)} plot(s)")


def results_file(smoke: bool, out: str | None) -> Path:
    """Where a run's results JSON goes: under ``bench/out/`` for the default destination (the
    source of the committed ``RESULTS.md``, which ``--render-only`` and a later run of some
    sections read), or beside the ``RESULTS.md`` of an ``--out`` folder, so that a run written
    elsewhere never replaces the results the committed report was rendered from."""
    name = "smoke-results.json" if smoke else "results.json"
    return Path(out) / name if out else OUT_DIR / name


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny data, a minute or two (CI)")
    parser.add_argument("--sections", help=f"comma list of {', '.join(SECTIONS)} (default all)")
    parser.add_argument(
        "--out", help="folder for RESULTS.md, the plots and the results JSON (default bench/)"
    )
    parser.add_argument(
        "--max-docs",
        type=int,
        default=100_000,
        help="largest synthetic corpus for BM25 scale (1000000 adds 1M)",
    )
    parser.add_argument("--reps", type=int, default=15, help="fan-out repetitions")
    parser.add_argument("--delay-ms", type=float, default=100.0, help="fan-out branch delay")
    parser.add_argument("--overhead-queries", type=int, default=150)
    parser.add_argument("--node-queries", type=int, default=20)
    parser.add_argument("--ingest-docs", type=int, default=150)
    parser.add_argument("--store-sizes", default="5000,100000", help="vector store sizes")
    parser.add_argument("--store-queries", type=int, default=100, help="questions per store")
    parser.add_argument("--no-rerank", action="store_true", help="skip the rerank row")
    parser.add_argument(
        "--load-requests", type=int, default=600, help="workers: requests per concurrency"
    )
    parser.add_argument(
        "--load-concurrency", default="1,2,4,8,16", help="workers: client concurrencies"
    )
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite RESULTS.md from saved results"
    )
    parser.add_argument("--llm", help="OpenAI-compatible base URL for the rewriter rows")
    parser.add_argument(
        "--answer-llm-questions",
        type=int,
        default=0,
        help="questions per range the LLM generator (SmolLM2, served here) answers (0 = none)",
    )
    parser.add_argument(
        "--rewriter-questions",
        type=int,
        default=40,
        help="HotpotQA questions per rewriter kind (0 = skip)",
    )
    return parser.parse_args(argv)


def render_only(smoke: bool, out: str | None) -> int:
    """Rewrite RESULTS.md and the plots from the saved results (no measuring)."""
    from bench.report import plot, render

    source = results_file(smoke, out)
    if not source.is_file():
        print(f"bench: no saved results at {source}; run the harness first", file=sys.stderr)
        return 2
    results = json.loads(source.read_text())
    out_dir = Path(out) if out else (OUT_DIR / "smoke" if smoke else BENCH_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "RESULTS.md").write_text(render(results, out_dir, plot(results, out_dir)))
    log(f"bench: rewrote {out_dir / 'RESULTS.md'} from {source}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render_only:
        return render_only(args.smoke, args.out)
    try:
        return Harness(args).run()
    except DataMissing as missing:
        print(str(missing), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
