"""The model-free query view, ``rewriter: {kind: prf}``, beside no rewriter, on the embedded
defaults (BM25 + Qdrant Edge with passages and sentences, minmax fusion, dense weight 0.75).

``prf`` expands the question with terms of its BM25 top documents and sends that expansion to
the lexical branch only, so a request runs one more lexical branch. Whether that helps depends
on the collection, so it is measured on three:

- training (where ``fb_docs`` x ``fb_terms`` would be chosen): SciFact train nDCG@10 and
  HotpotQA's first 100 questions AllSupport@10. Each branch list (the question's lexical and
  dense branches, each setting's expansion on the lexical branch) is computed once and fused
  with the graph's own ``fuse_branches``, as the graph's ``fuse`` node does;
- held out: SciFact test, HotpotQA questions 101-500 and Vaswani (never tuned on) through the
  real graph's retrieval path (``ParallelFusionRetriever``), with no rewriter and with ``prf``
  at its defaults, wall and CPU time per query beside the scores;
- beside the chat-model rewriters: the first ``--llm-questions`` HotpotQA report questions with
  no rewriter, ``prf`` and each chat-model kind on SmolLM2-135M (``bench.rewriting``'s rows,
  the quality section's), when ``llama-cpp-python`` and the packaged model are installed.

Indexes are built with the embedded defaults under ``--workdir`` (kept while the corpus and
the configuration are unchanged; corpus vectors come from the bench's embedding cache).

    python -m bench.query_expansion            # writes bench/PRF-RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench.data import DataMissing, data_root, load_hotpotqa, load_scifact

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = REPO_ROOT / "bench" / "out"
RESULTS_MD = REPO_ROOT / "bench" / "PRF-RESULTS.md"
DEPTH = 100
HOTPOT_TUNE = 100
FEEDBACK_GRID = [(d, t) for d in (3, 5, 10) for t in (5, 10, 20)]
LEX, DENSE = "lexical", "dense"


def log(message: str) -> None:
    print(message, flush=True)


def training_table(
    retrievers: dict[str, Any], queries: dict[str, str], measure: Callable[[dict], float]
) -> dict[str, float]:
    """The objective with no rewriter and at every ``fb_docs``/``fb_terms`` of the grid, fused
    offline at the shipped fusion defaults; a question with no expansion keeps its two
    branches (the graph's ``on_failure`` fallback to the question alone)."""
    from parallel_rag.nodes.fuse import DEFAULT_DENSE_WEIGHT, fuse_branches
    from parallel_rag.nodes.rewrite.rewriters import EmptyRewriteError, PseudoRelevanceRewriter
    from parallel_rag.studio.evaluation import ranked_doc_ids

    from bench.pipelines import branch_result

    lexical, dense = retrievers[LEX], retrievers[DENSE]
    base = {
        qid: [
            branch_result(LEX, 0, text, lexical.invoke(text, k=DEPTH), DEPTH),
            branch_result(DENSE, 1, text, dense.invoke(text, k=DEPTH), DEPTH),
        ]
        for qid, text in queries.items()
    }

    weights = {DENSE: DEFAULT_DENSE_WEIGHT}  # the shipped fusion: minmax, dense weighted

    def fused(branches: dict[str, list[dict]]) -> float:
        return measure(
            {
                qid: ranked_doc_ids(fuse_branches(bs, weights=weights, top_k=DEPTH))
                for qid, bs in branches.items()
            }
        )

    table = {"no rewriter": fused(base)}
    for fb_docs, fb_terms in FEEDBACK_GRID:
        rewriter = PseudoRelevanceRewriter(lexical.get_index, fb_docs=fb_docs, fb_terms=fb_terms)
        branches = {}
        for qid, text in queries.items():
            try:
                ((view, kind),) = rewriter.rewrite(text)
            except EmptyRewriteError:
                branches[qid] = base[qid]
                continue
            documents = lexical.invoke(view, k=DEPTH)
            expansion = branch_result(LEX, 0, view, documents, DEPTH, view_index=1, view_kind=kind)
            branches[qid] = [*base[qid], expansion]
        table[f"prf fb_docs={fb_docs}, fb_terms={fb_terms}"] = fused(branches)
    return table


def held_out_rows(
    config: dict[str, Any], work: Path, queries: dict[str, str], measures: Callable[[dict], dict]
) -> list[dict[str, Any]]:
    """The real graph's retrieval path with no rewriter and with ``prf`` at its defaults."""
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.configuration import RewriterConfig
    from parallel_rag.studio.evaluation import run_graph

    defaults = RewriterConfig(kind="prf")
    rows = []
    for label, rewriter in (
        ("no rewriter (the shipped defaults)", None),
        (f"prf (fb_docs={defaults.fb_docs}, fb_terms={defaults.fb_terms})", {"kind": "prf"}),
    ):
        graph = build_graph(
            {**config, **({"rewriter": rewriter} if rewriter else {})}, base_dir=work
        )
        wall, cpu = time.perf_counter(), time.process_time()
        runs = run_graph(graph, queries, DEPTH, batch_size=1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        n = max(len(queries), 1)
        rows.append(
            {
                "config": label,
                **measures(runs),
                "wall_ms": wall / n * 1000,
                "cpu_ms": cpu / n * 1000,
            }
        )
        log(f"[held out] {label}: {rows[-1]}")
    return rows


def beside_llm(config, work: Path, report_set: list[dict], corpus, limit: int) -> dict[str, Any]:
    """``bench.rewriting``'s rows (no rewriter, ``prf``, the chat-model kinds on SmolLM2 served
    by llama-cpp-python) on the first ``limit`` report questions; ``prf`` alone when the model
    cannot be served here (the reason is recorded)."""
    from bench import rewriting
    from bench.offline_llm import llama_server, offline_llm_available
    from bench.scoring import hotpot_metrics

    why_not = offline_llm_available()
    questions = min(limit, len(report_set))
    served = nullcontext(None) if why_not else llama_server(OUT_DIR / "llama-server.log")
    with served as base_url:
        rows = rewriting.rewriter_rows(
            config=config,
            work=work,
            report_set=report_set,
            corpus=corpus,
            metrics=hotpot_metrics,
            log=log,
            base_url=base_url,
            limit=limit,
            depth=DEPTH,
        )
    return {"rows": rows, "why_not": why_not, "questions": questions}


def _optional(value: float | None, digits: int) -> str:
    """A figure a row may not have (the no-rewriter row has no rewrite time)."""
    return "" if value is None else f"{value:.{digits}f}"


def reading(results: dict[str, Any]) -> list[str]:
    """What the training table says of each objective, and so of the default: ``prf`` may be
    on by default only if no training objective is lower with it at the setting chosen."""
    lines = []
    lowered = []
    for objective, table in results["training"].items():
        base = table["no rewriter"]
        settings = {name: v for name, v in table.items() if name != "no rewriter"}
        above = sum(v > base for v in settings.values())
        below = sum(v < base for v in settings.values())
        best = max(settings, key=settings.get)
        lines.append(
            f"- {objective}: {base:.4f} with no rewriter; {above} of {len(settings)} settings "
            f"above it, {below} below (from {min(settings.values()):.4f} to "
            f"{max(settings.values()):.4f}; best {best})."
        )
        if above == 0:
            lowered.append(objective)
    if lowered:
        lines.append(
            f"- `prf` lowers {' and '.join(lowered)} at every setting, so it is not on by "
            "default; it is there for collections like the one it helps (turn it on and check "
            "with `parallel-rag eval` on your own questions)."
        )
    else:
        lines.append("- Some setting raises every training objective: a candidate default.")
    return lines


def render(results: dict[str, Any]) -> str:
    from bench.tables import markdown_table

    parts = [
        "# The model-free query view (`rewriter: {kind: prf}`)",
        "",
        f"Written by `{results['command']}` on {results['when']} (load average at start "
        f"{results['load']}; {results['versions']}). The embedded defaults: BM25 + Qdrant Edge "
        "(passages and sentences), minmax fusion, dense weight 0.75, each branch asked for "
        f"{DEPTH}. With `prf` the expansion view adds a lexical branch to each request.",
        "",
        "## Training (SciFact train nDCG@10, HotpotQA first 100 AllSupport@10)",
        "",
        "Branch lists computed once and fused offline with the graph's `fuse_branches` at the "
        "shipped fusion defaults.",
        "",
    ]
    training = results["training"]
    names = list(next(iter(training.values())))
    sets = list(training)
    parts.append(
        markdown_table(
            ["setting", *sets],
            [[name, *(f"{training[s][name]:.4f}" for s in sets)] for name in names],
        )
    )
    parts += ["", *reading(results)]
    for collection, block in results["held_out"].items():
        measures = [m for m in block["rows"][0] if m not in ("config", "wall_ms", "cpu_ms")]
        parts += [
            "",
            f"## Held out: {collection} ({block['queries']} queries, {block['docs']} documents)",
            "",
            markdown_table(
                ["configuration", *measures, "wall ms/query", "CPU ms/query"],
                [
                    [
                        r["config"],
                        *(f"{r[m]:.4f}" for m in measures),
                        f"{r['wall_ms']:.1f}",
                        f"{r['cpu_ms']:.1f}",
                    ]
                    for r in block["rows"]
                ],
            ),
        ]
    llm = results.get("beside_llm")
    if llm:
        measures = ["R@10", "AllSupport@10", "AllSupport@20", "Answer@10"]
        parts += [
            "",
            f"## Beside the chat-model rewriters (HotpotQA, the first {llm['questions']} "
            "report questions)",
            "",
            "`bench.rewriting`'s rows, as the quality section runs them: SmolLM2-135M-Instruct "
            "(llama-cpp-python's server, temperature 0, 3 queries per rewrite); seconds are the "
            "whole row's."
            + (f" The chat-model kinds were not run: {llm['why_not']}." if llm["why_not"] else ""),
            "",
            markdown_table(
                ["configuration", *measures, "rewrite failed", "seconds"],
                [
                    [
                        r["config"],
                        *(f"{r[m]:.4f}" for m in measures),
                        _optional(r.get("rewrite_failed"), 4),
                        _optional(r.get("seconds"), 1),
                    ]
                    for r in llm["rows"]
                ],
            ),
        ]
    return "\n".join(parts) + "\n"


def versions() -> str:
    from importlib.metadata import version

    names = ("langgraph", "langchain-core", "bm25s", "qdrant-edge-py")
    return f"Python {sys.version.split()[0]}, " + ", ".join(f"{n} {version(n)}" for n in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=OUT_DIR / "prf")
    parser.add_argument("--out", type=Path, default=RESULTS_MD)
    parser.add_argument(
        "--llm-questions",
        type=int,
        default=40,
        help="HotpotQA report questions for the rows beside the chat-model rewriters (0 = skip)",
    )
    args = parser.parse_args(argv)
    from parallel_rag.graph.loading import default_config_dict, parse_config
    from parallel_rag.studio.evaluation import MissingDatasetError, load_beir, single_retrievers

    from bench.embedding_cache import EmbeddingCache, installed
    from bench.pipelines import ensure_index
    from bench.scoring import hotpot_measures, scifact_measures

    try:
        sci_train, sci_test = load_scifact("train"), load_scifact("test")
        hotpot = load_hotpotqa()
        vaswani = load_beir(data_root() / "vaswani", "test")
    except (DataMissing, MissingDatasetError) as error:
        print(error, file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "command": "python -m bench.query_expansion"
        + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv)),
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "versions": versions(),
        "training": {},
        "held_out": {},
    }
    config_dict = default_config_dict()
    config = parse_config(config_dict)
    tune_set, report_set = hotpot.split(HOTPOT_TUNE)

    def beir_measures(qrels):
        return lambda runs: scifact_measures(runs, qrels)

    def hotpot_of(questions):
        return lambda runs: hotpot_measures(runs, questions)

    with installed(EmbeddingCache(OUT_DIR / "cache")):
        for name, data in (("scifact", sci_test), ("hotpotqa", hotpot), ("vaswani", vaswani)):
            ensure_index(data, config, args.workdir / name)
        retrievers = {
            name: single_retrievers(config, args.workdir / name) for name in ("scifact", "hotpotqa")
        }
        judged = {q: t for q, t in sci_train.queries.items() if q in sci_train.qrels}
        sci_objective = beir_measures(sci_train.qrels)
        results["training"]["SciFact train nDCG@10"] = training_table(
            retrievers["scifact"], judged, lambda runs: sci_objective(runs)["nDCG@10"]
        )
        log(f"[train] scifact {results['training']['SciFact train nDCG@10']}")
        tune_queries = {q["_id"]: q["question"] for q in tune_set}
        tune_objective = hotpot_of(tune_set)
        results["training"][f"HotpotQA first {HOTPOT_TUNE} AllSupport@10"] = training_table(
            retrievers["hotpotqa"],
            tune_queries,
            lambda runs: tune_objective(runs)["AllSupport@10"],
        )
        log(f"[train] hotpotqa {results['training']}")
        held_out = (
            ("SciFact test", "scifact", sci_test, beir_measures(sci_test.qrels)),
            ("HotpotQA 101-500", "hotpotqa", None, hotpot_of(report_set)),
            ("Vaswani, never tuned on", "vaswani", vaswani, beir_measures(vaswani.qrels)),
        )
        for label, name, data, measures in held_out:
            if data is None:
                queries, docs = {q["_id"]: q["question"] for q in report_set}, len(hotpot.corpus)
            else:
                queries = {q: t for q, t in data.queries.items() if q in data.qrels}
                docs = len(data.corpus)
            rows = held_out_rows(config_dict, args.workdir / name, queries, measures)
            results["held_out"][label] = {"rows": rows, "queries": len(queries), "docs": docs}
        if args.llm_questions:
            results["beside_llm"] = beside_llm(
                config, args.workdir / "hotpotqa", report_set, hotpot.corpus, args.llm_questions
            )
    (OUT_DIR / "prf-results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    args.out.write_text(render(results), encoding="utf-8")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
