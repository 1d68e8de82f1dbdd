"""Renders the harness's results (``results.json``) as ``RESULTS.md`` plus PNG plots."""

from __future__ import annotations

from pathlib import Path

from bench.tables import cell, markdown_table


def _best(rows: list[dict], kinds: tuple[str, ...], measure: str) -> dict | None:
    picked = [r for r in rows if r["kind"] in kinds]
    return max(picked, key=lambda r: r[measure]) if picked else None


def _hotpot_table(rows: list[dict], rewrites: bool = False) -> str:
    headers = ["configuration", "R@10", "AllSupport@10", "AllSupport@20", "Answer@10"]
    if rewrites:
        headers += ["rewrite failed", "seconds"]
    body = []
    for r in rows:
        line = [
            r["config"],
            cell(r["R@10"]),
            cell(r["AllSupport@10"]),
            cell(r["AllSupport@20"]),
            cell(r["Answer@10"]),
        ]
        if rewrites:
            failed = r.get("rewrite_failed")
            line += ["–" if failed is None else f"{100 * failed:.0f}%", cell(r.get("seconds"), 0)]
        body.append(line)
    return markdown_table(headers, body)


def _ranking_table(rows: list[dict]) -> str:
    """nDCG@10 and R@100 of each configuration (the judged-document collections)."""
    return markdown_table(
        ["configuration", "nDCG@10", "R@100"],
        [[r["config"], cell(r["nDCG@10"]), cell(r["R@100"])] for r in rows],
    )


def _kind(rows: list[dict], kind: str) -> dict | None:
    return next((r for r in rows if r["kind"] == kind), None)


HEADLINE_COLUMNS = [
    "data set / measure",
    "fused graph, shipped defaults",
    "previous default (RRF k=60, equal weights)",
    "fused graph, RRF tuned on train",
    "best single",
    "EnsembleRetriever",
]


def headline(results: dict) -> list[list[str]]:
    """The quality figures of this run at the shipped defaults beside the baselines."""
    out: list[list[str]] = []
    quality = results.get("quality", {})
    for key, measure, label in (
        ("scifact", "nDCG@10", "SciFact test nDCG@10"),
        ("hotpotqa", "AllSupport@10", "HotpotQA dev500 AllSupport@10"),
        ("vaswani", "nDCG@10", "Vaswani nDCG@10 (not tuned on)"),
    ):
        data = quality.get(key)
        if not data or not data.get("rows"):
            continue
        if key == "hotpotqa":
            first = data["tune_questions"] + 1
            label += f" (questions {first}-{first + data['questions'] - 1})"
        rows = data["rows"]
        figures = [_kind(rows, k) for k in ("fused", "fused-previous", "fused-tuned")]
        single = _best(rows, ("single",), measure)
        ens = _kind(rows, "ensemble")
        out.append(
            [
                label,
                *[cell(r and r[measure]) for r in figures],
                f"{cell(single and single[measure])} ({single['config'].split(' (')[0]})"
                if single
                else "–",
                cell(ens and ens[measure]),
            ]
        )
    return out


def _named(stats: dict, *parts: str) -> tuple[str, dict] | None:
    """The first method whose name holds every part (method names are bench.orchestration's)."""
    return next(((name, s) for name, s in stats.items() if all(p in name for p in parts)), None)


ANSWERS_ELSEWHERE = "answer recall, citation support, answer length"
VASWANI_ELSEWHERE = "fused ≥ every single on an untuned third collection (Vaswani)"

ELSEWHERE = [
    (
        "dense branch (encode + search) at 1M vectors, Qdrant Edge",
        "`bench/ANN-RESULTS.md` (`python -m bench.ann_stores --sizes 1000000 --stores edge "
        "--hnsw-ef 256`): filling and indexing 1M vectors takes about half an hour here",
    ),
    (
        "retrieval path ≤ 1.15× LangGraph's floor on synthetic CPU-bound branches",
        "`bench/ORCHESTRATION-RESULTS.md` (`python -m bench.orchestration`); this run measures "
        "the floor on the real SciFact branches (overhead table)",
    ),
    (
        "extractive generation on unseen evidence, sentence vectors stored at ingest",
        "`bench/GENERATION-RESULTS.md` (`python -m bench.generation_latency`)",
    ),
    (
        ANSWERS_ELSEWHERE,
        "`bench/ANSWER-RESULTS.md` (`python -m bench.answers`)",
    ),
    (
        VASWANI_ELSEWHERE,
        "`bench/FUSION-RESULTS.md` (`python -m bench.fusion_methods`)",
    ),
    (
        "load: 2,000 requests at concurrency 16 over a 100k-chunk index",
        "`bench/LOAD-RESULTS.md` (`python -m bench.load --corpus collections`)",
    ),
]
"""Speed and answer bars this harness does not measure, and where their figures come from."""


def speed_headline(results: dict) -> list[list[str]]:
    """The speed figures of this run, then the bars measured elsewhere (named with their file)."""
    out: list[list[str]] = []
    fan = results.get("latency", {}).get("fanout")
    if fan and fan.get("rows"):
        row = max(fan["rows"], key=lambda r: r["branches"])
        n, delay = row["branches"], row["delay_ms"]

        def times(name: str) -> str:
            value = row.get(f"{name} p50")
            return f"{name} {value / delay:.2f}x" if value is not None else ""

        names = [
            "ParallelFusionRetriever.invoke",
            "ParallelFusionRetriever.ainvoke",
            "graph.invoke",
            "graph.ainvoke",
            "EnsembleRetriever.invoke",
        ]
        out.append(
            [
                f"fan-out, {n} branches x {delay:.0f} ms (p50 wall / slowest branch)",
                ", ".join(t for t in map(times, names) if t) + f" (sum of delays = {n:.0f}x)",
            ]
        )
    over = results.get("latency", {}).get("overhead")
    if over and over.get("stats"):
        stats = over["stats"]
        base = stats.get(over.get("baseline", ""), {})
        ens = _named(stats, "EnsembleRetriever.invoke")
        floor = _named(stats, "floor StateGraph.invoke")
        for suffix in ("invoke", "ainvoke"):
            found = _named(stats, f"ParallelFusionRetriever.{suffix}")
            if found is None:
                continue
            name, s = found
            extra = []
            if floor:
                extra.append(f"{s['p50'] / floor[1]['p50']:.2f}x LangGraph's floor")
            if ens and suffix == "invoke":
                extra.append(
                    f"EnsembleRetriever.invoke {cell(ens[1]['p50'], 2)} ms "
                    f"(CPU {cell(ens[1]['cpu'], 2)})"
                )
            out.append(
                [
                    f"SciFact, real branches: {name} vs hand-written (p50 wall)",
                    f"{s['ratio_p50']:.2f}x ({cell(s['p50'], 2)} vs {cell(base.get('p50'), 2)} ms; "
                    f"CPU {cell(s['cpu'], 2)} vs {cell(base.get('cpu'), 2)} ms)"
                    + (f"; {'; '.join(extra)}" if extra else ""),
                ]
            )
    scale = results.get("scale", {})
    for row in scale.get("bm25", []):
        if row.get("docs", 0) >= 100_000 and "error" not in row:
            out.append(
                [
                    f"BM25 {row['engine']} query p50 / p95 at {row['docs']:,} docs",
                    f"{cell(row['query_ms']['p50'], 2)} / "
                    f"{cell(row['query_ms']['p95'], 2)} ms wall, "
                    f"{cell(row.get('query_cpu_ms', {}).get('p50'), 2)} ms CPU; build "
                    f"{cell(row['build_s'], 1)} s, peak RSS {cell(row['peak_rss_mb'], 0)} MB",
                ]
            )
    if not any(r.get("docs") == 1_000_000 for r in scale.get("bm25", [])):
        out.append(
            [
                "BM25 build and query at 1M documents",
                "not measured by this run: `bench/BM25-RESULTS.md` (`python -m bench.bm25_engines "
                "--scale 1000000`), or `python -m bench --sections scale --max-docs 1000000`",
            ]
        )
    for row in scale.get("stores", []):
        if row.get("n") == 100_000 and "error" not in row:
            out.append(
                [
                    f"dense branch (encode + search) at 100k clustered vectors, {row['store']}",
                    f"p50 {cell(row['query_ms']['p50'], 1)} ms wall / "
                    f"{cell(row['query_cpu_ms']['p50'], 1)} ms CPU (search alone "
                    f"{cell(row['search_ms']['p50'], 2)} ms), recall@10 "
                    f"{cell(row['recall_at_10'])}, upsert {row['upsert_per_s']:,.0f} vectors/s",
                ]
            )
    here = {  # measured by this run after all: its own tables say it
        ANSWERS_ELSEWHERE: bool(results.get("answers")),
        VASWANI_ELSEWHERE: bool(results.get("quality", {}).get("vaswani")),
    }
    out += [
        [what, f"not measured by this run: {where}"]
        for what, where in ELSEWHERE
        if not here.get(what)
    ]
    return out


ANSWER_RECALL_SHARE = 0.8
"""The answer bar: recall at least this share of the retrieval ceiling."""


def _generator_row(rows: list[dict], prefix: str) -> dict | None:
    return next((r for r in rows if r["generator"].startswith(prefix)), None)


def answers_headline(results: dict) -> list[list[str]]:
    """The answer bars read off this run's report questions: recall against the share of the
    ceiling, citation support, and length against the generator the bars were set against."""
    ranges = (results.get("answers") or {}).get("ranges") or []
    if not ranges:
        return []
    report = ranges[-1]
    after = _generator_row(report["rows"], "extractive, default")
    before = _generator_row(report["rows"], "extractive, before")
    if after is None:
        return []
    bar = ANSWER_RECALL_SHARE * after["ceiling"]
    verdict = "met" if after["recall"] >= bar else f"missed by {bar - after['recall']:.3f}"
    support = "met" if after["citation_support"] >= 0.9 else "missed"
    rows = [
        [
            f"answer recall ≥ {ANSWER_RECALL_SHARE} × retrieval ceiling",
            f"{cell(after['recall'])} against a ceiling of {cell(after['ceiling'])} (bar "
            f"{cell(bar)}): {verdict}",
        ],
        ["citation support ≥ 0.9", f"{cell(after['citation_support'])}: {support}"],
    ]
    if before is not None:
        shorter = (
            after["median_words"] <= before["median_words"]
            and after["mean_words"] <= before["mean_words"]
        )
        rows.append(
            [
                "answers no longer than before (median / mean words)",
                f"{after['median_words']:.1f} / {after['mean_words']:.1f} against "
                f"{before['median_words']:.1f} / {before['mean_words']:.1f} for "
                f"{before['generator'].removeprefix('extractive, ')}: "
                + ("met" if shorter else "missed"),
            ]
        )
    return [[f"HotpotQA questions {report['questions']}: {what}", figure] for what, figure in rows]


def answers_section(answers: dict) -> list[str]:
    """The answer harness's tables, one per question range (tuning first)."""
    from bench.answers import table

    parts = ["## Answers: HotpotQA dev500 (extractive generator)"]
    ranges = answers.get("ranges") or []
    if ranges:
        first = ranges[0]
        parts.append(
            f"Each question asked through `build_graph()` on the embedded defaults (top_k "
            f"{first['top_k']}, {first['docs']} pooled paragraphs); every generator answers from "
            "the same fused documents. Answer recall: a gold answer string occurs in the answer "
            "(yes/no questions excluded); answer first: before the first citation mark; "
            "retrieval ceiling: in some fused top-k paragraph; citation support: the answer cites "
            "a gold paragraph; words without citation marks. The first range was used for "
            "tuning. The LLM generator's rows and the ideas tried are in "
            "`bench/ANSWER-RESULTS.md` (`python -m bench.answers`)."
        )
    for measured in ranges:
        parts.append(f"### Questions {measured['questions']}")
        parts.append(table(measured["rows"]))
        parts += measured.get("notes") or []
    return parts


FANOUT_NAMES = (
    "graph.invoke",
    "graph.ainvoke",
    "ParallelFusionRetriever.invoke",
    "ParallelFusionRetriever.ainvoke",
    "EnsembleRetriever.invoke",
    "EnsembleRetriever.ainvoke",
)

BARS_FILE = Path(__file__).resolve().parent / "BARS.md"
"""The performance and quality bars with the figure that meets or misses each one, collected
from the focused benchmark scripts' result files; placed at the top of ``RESULTS.md``."""


def render(results: dict, out_dir: Path, plots: dict[str, str]) -> str:
    meta = results["meta"]
    parts: list[str] = []
    title = "# Benchmarks" + (
        " (smoke run: tiny data, figures meaningless)" if meta["smoke"] else ""
    )
    parts.append(title)
    parts.append(
        f"Last written by `{meta['command']}` on {meta['date']} (that run took "
        f"{meta['duration_min']:.1f} min; the table below says which run measured each "
        "section). Regenerate with `make bench` (full, manual), `python -m bench --sections "
        "...` (some sections, the others kept), or `make bench-smoke` (CI-sized)."
    )
    bars = BARS_FILE.read_text(encoding="utf-8").strip() if BARS_FILE.is_file() else ""
    if bars and not meta["smoke"]:
        parts.append(bars)
    parts.append("## Machine and versions")
    parts.append(
        markdown_table(
            ["what", "value"],
            [[k, v] for k, v in meta["machine"].items()]
            + [[k, v] for k, v in meta["versions"].items()],
            "ll",
        )
    )
    sections = meta.get("sections") or {}
    if sections:
        parts.append(
            markdown_table(
                ["section", "measured", "load avg at start (1/5/15)"],
                [
                    [
                        name,
                        f"{s['date']}" + (" (carried over)" if s.get("carried") else ""),
                        s.get("load", "?"),
                    ]
                    for name, s in sections.items()
                ],
                "lll",
            )
        )
    # the contention note is rebuilt from every section's own load (sections may be carried)
    notes = [n for n in meta.get("notes") or [] if not n.startswith("The machine was shared")]
    cores = int(meta["machine"].get("cores") or 1)
    busy = []
    for name, s in sections.items():
        try:
            five_min = float(str(s.get("load", "")).split(",")[1])
        except (IndexError, ValueError):
            continue
        if five_min > cores:
            busy.append(f"{name} {five_min:.1f}")
    if busy:
        notes.insert(
            0,
            f"The machine was shared while these sections ran (5-min load average on "
            f"{cores} cores: {', '.join(busy)}; other people's test suites). Wall-clock times "
            "are inflated and noisy accordingly; the CPU-time columns are the "
            "contention-robust figures, and ratios measured round-robin (every method under the "
            "same load) are more stable than absolute times.",
        )
    meta = {**meta, "notes": notes}
    if meta.get("notes"):
        parts.append("## What this run did and did not do")
        parts.append("\n".join(f"- {n}" for n in meta["notes"]))

    head = headline(results)
    if head:
        parts.append("## Headline")
        parts.append(
            "Measured by this run, side by side: the fused graph at the shipped defaults (a "
            "configuration with no settings: BM25 + Qdrant Edge over passages, the default "
            "fusion), the previous default (RRF k=60, equal weights, one vector per document), "
            "RRF tuned on training data, the best single retriever and LangChain's "
            "`EnsembleRetriever` over the shipped retriever objects."
        )
        parts.append(markdown_table(HEADLINE_COLUMNS, head))
    for name, rows, caption in (
        (
            "answers",
            answers_headline(results),
            "Answers, measured by this run at the shipped defaults (the extractive generator on "
            "the fused top 10):",
        ),
        (
            "speed",
            speed_headline(results),
            "Speed: this run's figures first; the last rows name the focused script and results "
            "file of each bar this harness does not measure.",
        ),
    ):
        if rows:
            parts.append(caption)
            parts.append(markdown_table([name, "figure"], rows, "ll"))

    quality = results.get("quality", {})
    sci = quality.get("scifact")
    if sci:
        parts.append("## Quality: SciFact test")
        parts.append(
            f"{sci['queries']} test queries, {sci['docs']} documents, each retriever asked for "
            f"{sci['depth']} candidates; the fused graph returns its top {sci['depth']}. "
            "Every row runs over the same indexes, built fresh by this run: BM25 at the product's "
            "defaults and Qdrant Edge with one vector per document and with passages (the "
            "shipped default). The previous default searched Qdrant local mode exactly; Qdrant "
            "Edge searches a collection this small exactly too, so its ranking is the same. "
            "Bar: nDCG@10 ≥ 0.73 at the shipped defaults, fused ≥ every single."
        )
        parts.append(_ranking_table(sci["rows"]))
        t = sci["tuned"]
        g = t["grids"]
        parts.append(
            f"Tuned on SciFact **train** only ({t['objective']}), by grid search: BM25 k1 in "
            f"{g['k1']} x b in {g['b']} on BM25 alone, then RRF k in {g['fusion_k']} x dense "
            f"weight in {g['dense_weight']} (lexical weight 1) on the fused run. Chosen: "
            f"k1={t['k1']}, b={t['b']}, RRF k={t['fusion_k']}, dense weight "
            f"{t['dense_weight']} (train objective {t['score']:.4f}), over the shipped dense "
            "branch. Candidate depth, analyzer and embedding model were not tuned. Test queries "
            "were never used for tuning. The shipped fusion (method and dense weight) was chosen "
            "on the same training data by `bench/fusion_methods.py` (`FUSION-RESULTS.md`)."
        )
        if sci.get("rerank_note"):
            parts.append(
                sci["rerank_note"] + " The embedding reranker re-scores both branches with the "
                "same MiniLM cosine the dense branch already ranks by, so fusion then sees two "
                "nearly dense orderings and loses the lexical signal. Per-scorer rerank cost and "
                "a probe cross-encoder are measured by `bench/rerank.py` (a separate script that "
                "builds its own indexes; the harness does not call it)."
            )
    engines = quality.get("bm25_engines")
    if engines:
        parts.append("### BM25 engines and analyzers (SciFact test, nDCG@10)")
        parts.append(
            "Both engines implement the same Lucene BM25 variant and must rank identically; "
            "`plain` is the `\\w+` lowercase analyzer, `english` adds stopwords and Snowball."
        )
        parts.append(
            markdown_table(
                ["analyzer", "engine", "nDCG@10", "ms / query (5k docs)"],
                [
                    [r["analyzer"], r["engine"], cell(r["nDCG@10"], 4), cell(r["ms_per_query"], 2)]
                    for r in engines
                ],
                "llrr",
            )
        )
    hp = quality.get("hotpotqa")
    if hp:
        parts.append("## Quality: HotpotQA dev500 (pooled paragraphs)")
        parts.append(
            f"Reported on questions {hp['tune_questions'] + 1}–"
            f"{hp['tune_questions'] + hp['questions']} ({hp['questions']} questions; the first "
            f"{hp['tune_questions']} were used for tuning), {hp['docs']} paragraphs. "
            "AllSupport@k: both gold paragraphs in the top k. Answer@10: an answer string occurs "
            "in a top-10 paragraph (yes/no questions excluded). Bar: AllSupport@10 ≥ 0.90 at the "
            "shipped defaults, fused ≥ every single."
        )
        parts.append(_hotpot_table(hp["rows"]))
        if hp.get("rewriter_rows"):
            parts.append("### HotpotQA with each rewriter kind (prf, and the offline LLM)")
            if hp.get("rewriter_note"):
                parts.append(hp["rewriter_note"])
            parts.append(_hotpot_table(hp["rewriter_rows"], rewrites=True))
        t = hp["tuned"]
        parts.append(
            f"Tuned on HotpotQA's first {hp['tune_questions']} questions only ({t['objective']}),"
            f" same grids as SciFact: k1={t['k1']}, b={t['b']}, RRF k={t['fusion_k']}, dense "
            f"weight {t['dense_weight']}."
        )
        if hp.get("rewriter_note") and not hp.get("rewriter_rows"):
            parts.append(hp["rewriter_note"])
    vas = quality.get("vaswani")
    if vas:
        parts.append("## Quality: Vaswani (not tuned on)")
        parts.append(
            f"{vas['queries']} judged queries, {vas['docs']} documents, each retriever asked for "
            f"{vas['depth']} candidates, over indexes built fresh by this run. No setting was "
            "chosen on this collection: it checks that the fused list stays at or above every "
            "single retriever where nothing was fitted to it. Bar: fused ≥ every single on "
            "nDCG@10 and R@100."
        )
        parts.append(_ranking_table(vas["rows"]))
    if "quality" in plots:
        parts.append(f"![quality per configuration]({plots['quality']})")
    if results.get("answers"):
        parts += answers_section(results["answers"])

    lat = results.get("latency", {})
    fan = lat.get("fanout")
    if fan:
        parts.append("## Latency: fan-out")
        parts.append(
            f"Each branch is a retriever that sleeps {fan['delay_ms']:.0f} ms (`time.sleep` on "
            "the sync path, `asyncio.sleep` on the async one) and returns 10 fixed documents; "
            f"wall time per request, median (p95) of {fan['reps']} round-robin repetitions. "
            "`graph` runs the whole pipeline (fan-out, fuse, lexical extractive generate); "
            "`ParallelFusionRetriever` is its retrieval path (stopped after `fuse`). Bar: the "
            "retrieval path ≤ 1.1× the slowest branch for 2–4 branches, sync and async."
        )
        names = [n for n in FANOUT_NAMES if f"{n} p50" in fan["rows"][0]]
        parts.append(
            markdown_table(
                ["branches", "sum of delays", "max of delays", *names],
                [
                    [r["branches"], f"{r['sum_ms']:.0f}", f"{r['max_ms']:.0f}"]
                    + [f"{r[n + ' p50']:.0f} ({r[n + ' p95']:.0f})" for n in names]
                    for r in fan["rows"]
                ],
            )
        )
        if "fanout" in plots:
            parts.append(f"![latency vs branches]({plots['fanout']})")
    over = lat.get("overhead")
    if over:
        parts.append("## Latency: overhead of the graph's retrieval path")
        parts.append(
            f"{over['queries']} SciFact test claims, the shipped branches (BM25 + Qdrant Edge "
            f"over passages) over {over.get('docs', '?')} abstracts with the shipped query "
            f"encoder; every method asks each branch for {over['depth']} and returns the top "
            f"{over['top_k']}. Methods (`bench/orchestration.py`'s, measured with its `measure`): "
            "the product's `ParallelFusionRetriever` (the compiled graph stopped after `fuse`; "
            "the shipped fusion), a hand-written thread pool and `asyncio.gather` with RRF "
            f"(k={over.get('fusion_k', 60)}), LangGraph's floor (a minimal `StateGraph`: one "
            "`Send` per retriever, an additive reducer, a deferred RRF node) and "
            "`EnsembleRetriever`, round robin over the same retriever objects, one request in "
            "flight, each call a query text never asked before (so the query encode is real "
            "every time). CPU = process CPU time per request. Bars: the retrieval path ≤ 1.3× "
            "the hand-written pipeline at p50 and no slower than `EnsembleRetriever.invoke`."
        )
        base = over.get("baseline", "")
        parts.append(
            markdown_table(
                [
                    "method",
                    "p50 ms",
                    "p95 ms",
                    "CPU ms p50",
                    f"x {base} p50" if base else "x baseline p50",
                    "x p95",
                    "x CPU",
                ],
                [
                    [
                        name,
                        cell(s["p50"], 2),
                        cell(s["p95"], 2),
                        cell(s.get("cpu"), 2),
                        cell(s["ratio_p50"], 2),
                        cell(s["ratio_p95"], 2),
                        cell(s.get("cpu_ratio_p50"), 2),
                    ]
                    for name, s in over["stats"].items()
                ],
            )
        )
    nodes = lat.get("per_node")
    if nodes:
        parts.append("## Latency: per node")
        parts.append(
            f"`graph.invoke` on {nodes['queries']} SciFact test queries with the shipped "
            "defaults (BM25 + Qdrant Edge over passages, the default extractive generator with "
            "embedding sentence selection, top_k 5), real model calls (no embedding cache). "
            "The indexes here are written by the evaluation indexer, which stores no sentence "
            "vectors, so `generate` embeds its evidence sentences per request; with the vectors "
            "`parallel-rag ingest` stores, see `bench/GENERATION-RESULTS.md`. Fan-out nodes "
            "report their slowest task."
        )
        parts.append(
            markdown_table(
                ["node", "p50 ms", "p95 ms"],
                [[r["node"], cell(r["p50"], 1), cell(r["p95"], 1)] for r in nodes["rows"]],
            )
        )

    scale = results.get("scale", {})
    if scale.get("bm25"):
        parts.append("## Scale: BM25")
        parts.append(scale.get("corpus_note", ""))
        parts.append(
            markdown_table(
                [
                    "docs",
                    "engine",
                    "build s",
                    "index MB (RSS growth)",
                    "peak RSS MB",
                    "terms",
                    "queries",
                    "p50 ms",
                    "p95 ms",
                    "CPU ms p50",
                ],
                [
                    [
                        f"{r['docs']:,}",
                        r["engine"],
                        "error",
                        r["error"][:80],
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                    ]
                    if "error" in r
                    else [
                        f"{r['docs']:,}",
                        r["engine"],
                        cell(r["build_s"], 1),
                        cell(r["index_mb"], 0),
                        cell(r["peak_rss_mb"], 0),
                        f"{r['terms']:,}",
                        r["query_ms"]["n"],
                        cell(r["query_ms"]["p50"], 2),
                        cell(r["query_ms"]["p95"], 2),
                        cell(r.get("query_cpu_ms", {}).get("p50"), 2),
                    ]
                    for r in scale["bm25"]
                ],
                "rlrrrrrrrr",
            )
        )
        if scale.get("skipped"):
            parts.append(scale["skipped"])
    if scale.get("stores"):
        from bench.ann_stores import HEADER, fmt_row

        parts.append("## Scale: embedded vector stores (dense branch)")
        parts.append(scale.get("stores_note", ""))
        parts.append(
            "Bars: dense branch p50 ≤ 25 ms at 100k on the embedded default, recall@10 ≥ 0.95, "
            "upsert ≥ 2,000 vectors/s."
        )
        # rows of the earlier random-vector format (carried over from an old run) have no "n"
        rows = [r for r in scale["stores"] if "n" in r]
        parts.append("\n".join([HEADER, *(fmt_row(r, "this") for r in rows)]))
    ing = results.get("ingest")
    if ing:
        parts.append("## Ingestion")
        if "error" in ing:
            parts.append(f"Ingestion run failed: {ing['error']}")
        else:
            parts.append(
                f"`ingest_paths` (read JSONL, chunk at 1000 chars, embed, write BM25 + Qdrant "
                f"local) on the first {ing['docs']} SciFact abstracts ({ing['chunks']} chunks) "
                "against `embed_documents` alone on the same chunk texts, median of alternating "
                "rounds, model already loaded. This worker writes the previous default's Qdrant "
                "local store; ingest into the shipped Qdrant Edge with passages and stored "
                "sentence vectors is timed by `bench/generation_latency.py` "
                "(`GENERATION-RESULTS.md`)."
            )
            parts.append(
                markdown_table(
                    ["measure", "value"],
                    [
                        ["raw encode (chunks/s)", cell(ing["raw_chunks_per_s"], 1)],
                        ["ingest end to end (chunks/s)", cell(ing["ingest_chunks_per_s"], 1)],
                        ["ingest end to end (docs/s)", cell(ing["ingest_docs_per_s"], 1)],
                        [
                            "ingest rate / raw encode rate",
                            f"{100 * ing['ingest_vs_raw']:.0f}%"
                            + (
                                " (over 100%: noise of a shared CPU)"
                                if ing["ingest_vs_raw"] > 1
                                else ""
                            ),
                        ],
                        [
                            "query encode p50 / p95 (ms)",
                            f"{cell(ing['query_encode_ms']['p50'], 1)} / "
                            f"{cell(ing['query_encode_ms']['p95'], 1)}",
                        ],
                        ["peak RSS of the ingest process (MB)", cell(ing["peak_rss_mb"], 0)],
                    ],
                    "lr",
                )
            )
    if results.get("beyond"):
        parts += beyond_section(results["beyond"])
    return "\n\n".join(p for p in parts if p) + "\n"


def beyond_section(beyond: dict) -> list[str]:
    """Issue 36's bars: each table is its focused script's own (``bench.milvus_fulltext``,
    ``bench.shared_cache``, ``bench.load``), wall time beside CPU time."""
    from bench import load, milvus_fulltext, shared_cache

    parts = ["## Beyond one machine"]
    fulltext = beyond.get("fulltext")
    if fulltext:
        parts.append(
            "### Lexical branch: Milvus full text beside bm25s\n\n"
            "The `milvus` backend with `search: full_text` (Milvus Lite, written by ingest's "
            "writer, searched by the backend's retriever) beside the `bm25` backend on the same "
            "chunks and judged queries, k = 10. `bm25s plain` has Milvus's `standard` tokens "
            "(lowercase `\\w+`, no stopwords, no stemming): the Δ against it is what is left "
            "of the distance once the analyzer is the same; `milvus, stemmed before` is Milvus "
            "over text and queries the `bm25` backend's `english` analyzer already stemmed (what "
            "Milvus Lite gives when the stemming happens outside it). Build = ingest's write and "
            "the first open; latency one query at a time, CPU of this process (Milvus Lite runs "
            "in it)."
        )
        parts += [milvus_fulltext.table(r) for r in fulltext["collections"].values()]
        probe = fulltext.get("stemmer_probe") or {}
        parts.append(
            "Milvus Lite and a stemmer: with Milvus's documented English stemmer "
            f"(`analyzer_params: {probe.get('analyzer_params')}`) it **{probe.get('stemmer')}** "
            '("Computers running" is not found for "computer runs"); the built-in '
            f"`{{type: english}}` analyzer: {probe.get('english')}."
        )
    cache = beyond.get("cache")
    if cache:
        parts.append(
            "### Context cache: Redis beside in-process\n\n"
            "Hit = `lookup` of a cached context of 4 documents after a warm-up (CPU: the router "
            "process's); hit rate = a Zipf workload answered in turn by the replicas "
            "(`bench.shared_cache`, its own `redis-server` on loopback)."
        )
        parts.append(shared_cache.tables(cache))
    workers = beyond.get("workers")
    if workers:
        parts.append(
            "### `serve --workers 2` beside one worker\n\n"
            f"The load harness (`bench.load`: the example corpus at the embedded defaults, the "
            f"example questions cycled), {workers['requests']} requests at each client "
            "concurrency against one server per worker count; server CPU counts every worker."
        )
        parts.append(load.sweep_table(workers["rows"]))
    return parts


def plot(results: dict, out_dir: Path, prefix: str = "") -> dict[str, str]:
    """latency-vs-branches and quality-per-configuration PNGs; returns {name: file name}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, str] = {}
    fan = results.get("latency", {}).get("fanout")
    if fan and fan.get("rows"):
        rows = fan["rows"]
        x = [r["branches"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        ax.plot(x, [r["sum_ms"] for r in rows], "k--", label="sum of delays")
        ax.plot(x, [r["max_ms"] for r in rows], "k:", label="max of delays")
        styles = {
            "graph.invoke": "o-",
            "graph.ainvoke": "s-",
            "ParallelFusionRetriever.invoke": "D-",
            "ParallelFusionRetriever.ainvoke": "d-",
            "EnsembleRetriever.invoke": "^-",
            "EnsembleRetriever.ainvoke": "v-",
        }
        for name, style in styles.items():
            if f"{name} p50" in rows[0]:
                ax.plot(x, [r[name + " p50"] for r in rows], style, label=name)
        ax.set_xlabel(f"branches (each sleeps {fan['delay_ms']:.0f} ms)")
        ax.set_ylabel("wall time per request, p50 (ms)")
        ax.set_xticks(x)
        ax.set_ylim(bottom=0)
        ax.set_title("Fan-out latency vs number of branches")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"{prefix}latency_vs_branches.png"
        fig.savefig(out_dir / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        made["fanout"] = name

    quality = results.get("quality", {})
    panels = [
        (key, measure, title)
        for key, measure, title in (
            ("scifact", "nDCG@10", "SciFact test nDCG@10"),
            ("hotpotqa", "AllSupport@10", "HotpotQA AllSupport@10"),
            ("vaswani", "nDCG@10", "Vaswani nDCG@10 (not tuned on)"),
        )
        if quality.get(key, {}).get("rows")
    ]
    if panels:
        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.4 * len(panels)), squeeze=False)
        colors = {
            "single": "#8da0cb",
            "single-tuned": "#a6b5dc",
            "fused": "#fc8d62",
            "fused-previous": "#fdb99b",
            "fused-tuned": "#e5703e",
            "fused-rerank": "#d95f02",
            "ensemble": "#66c2a5",
            "rewriter": "#e78ac3",
        }
        for ax, (key, measure, title) in zip(axes[:, 0], panels, strict=True):
            rows = quality[key]["rows"] + quality[key].get("rewriter_rows", [])
            labels = [
                r["config"] if len(r["config"]) < 70 else r["config"][:67] + "..." for r in rows
            ]
            values = [r[measure] for r in rows]
            ax.barh(range(len(rows)), values, color=[colors.get(r["kind"], "#999") for r in rows])
            ax.set_yticks(range(len(rows)), labels, fontsize=7)
            ax.invert_yaxis()
            low = max(0.0, min(values) - 0.1)
            ax.set_xlim(low, min(1.0, max(values) + 0.05))
            for i, v in enumerate(values):
                ax.text(v, i, f" {v:.3f}", va="center", fontsize=7)
            ax.set_title(title, fontsize=10)
            ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        name = f"{prefix}quality_per_configuration.png"
        fig.savefig(out_dir / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        made["quality"] = name
    return made
