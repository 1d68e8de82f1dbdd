"""``python -m bench.answers``: how well the answers answer, on HotpotQA dev500.

Every question of the chosen range (default 101-500; 1-100 are for tuning) is asked through
``build_graph()`` on the embedded defaults (BM25 + Qdrant on the packaged MiniLM, fused) with
``top_k`` 10. The fused documents of each question are then answered by:

* the default extractive generator of the checkout (what the graph itself answered);
* the extractive generator of an earlier revision (``--before REV``, read with ``git show``), on
  the same documents, so before and after sit side by side;
* the LLM generator on SmolLM2-135M (llama.cpp server, started here as the integration tests
  start it) on the first ``--llm-questions`` questions only (seconds per answer on a small CPU).

Measures (yes/no questions are excluded from recall: "yes" is no span of any paragraph):

* answer recall: a gold answer string occurs in the answer (case-insensitive);
* answer first: a gold answer string occurs in the answer's first cited run (the text before
  its first citation mark): the answer opens with what answers;
* retrieval ceiling: a gold answer string occurs in some fused top-k document: the most an
  extractive answer can reach;
* citation support: the answer cites at least one gold supporting paragraph (over answers
  that cite anything); citation precision: the share of cited paragraphs that are gold;
* median answer length in words (citation markers not counted).

Prints a table and writes ``bench/ANSWER-RESULTS.md`` (``--out`` elsewhere). Indexes, retrieved
documents and vectors are cached under ``bench/out/`` (``--fresh`` retrieves again).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LANGSMITH_TRACING", "false")

from bench.data import (  # noqa: E402
    REPO_ROOT,
    DataMissing,
    HotpotQA,
    load_hotpotqa,
)
from bench.embedding_cache import EmbeddingCache, installed  # noqa: E402
from bench.pipelines import ensure_index, fingerprint  # noqa: E402
from bench.scoring import score  # noqa: E402

OUT_DIR = REPO_ROOT / "bench" / "out"
WORK = OUT_DIR / "answers"
RESULTS_MD = REPO_ROOT / "bench" / "ANSWER-RESULTS.md"
TUNE_QUESTIONS = 100  # questions 1-100 are for tuning; the bars are read on the rest
BEFORE_REV = "2dba63c"  # the last revision whose extractive generator kept its top-3 sentences
# where revisions before the split of nodes/generate/ (33) kept the whole extractive generator
GENERATORS_PATH = "nodes/generate/generators.py"
GENERATE_DIR = "nodes/generate"  # the generators now, one module a job
FINDINGS = "## Findings"


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


# -- measures ------------------------------------------------------------------------------


# -- retrieval -------------------------------------------------------------------------------


def default_config():
    from parallel_rag.graph.loading import default_config_dict, parse_config

    return parse_config(default_config_dict(), source="embedded defaults")


def retrieval_settings(config) -> dict:
    """The configuration that decides the fused documents: all of it but the generator's
    section (a generator setting never changes what retrieval returns)."""
    settings = config.model_dump(mode="json")
    settings.pop("generator", None)
    return settings


def asked_file(config, questions: list[dict], top_k: int, directory: Path = WORK) -> Path:
    key = fingerprint([retrieval_settings(config), top_k, [q["_id"] for q in questions]])
    return directory / f"asked-{key}.json"


def retrieve(
    graph, config, questions: list[dict], top_k: int, fresh: bool, directory: Path = WORK
) -> list[dict]:
    """Ask every question through the graph; per question the fused documents. Cached in
    ``directory`` (beside the index they came from) by the retrieval settings, top_k and
    question ids."""
    cache_file = asked_file(config, questions, top_k, directory)
    if cache_file.is_file() and not fresh:
        return json.loads(cache_file.read_text())
    from parallel_rag.studio.evaluation import DOC_ID_KEY

    rows = []
    started = time.perf_counter()
    for i, question in enumerate(questions, start=1):
        result = graph.invoke({"query": question["question"], "top_k": top_k})
        docs = [
            {"id": d["id"], "content": d["content"], "metadata": d["metadata"]}
            for d in result["documents"]
        ]
        retrieved = [str(d["metadata"][DOC_ID_KEY]) for d in docs]
        rows.append({"id": question["_id"], "documents": docs, "retrieved": retrieved})
        if i % 50 == 0:
            log(f"[ask] {i}/{len(questions)} ({time.perf_counter() - started:.0f}s)")
    cache_file.write_text(json.dumps(rows))
    return rows


# -- generators ----------------------------------------------------------------------------


MOVED_MODULES = {"parallel_rag.backends.text_analysis": "parallel_rag.backends.bm25.analysis"}
"""Modules the old generator imports that have since moved (same names, new homes)."""


def generator_at(revision: str):
    """``ExtractiveGenerator`` as ``nodes/generate/generators.py`` defined it at ``revision``
    (a revision from before that file was split by job, as ``BEFORE_REV`` is)."""
    source = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "show", f"{revision}:{GENERATORS_PATH}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for old, new in MOVED_MODULES.items():  # what the old file imports, where it lives now
        source = source.replace(f"from {old} import", f"from {new} import")
    name = f"bench_generators_{re.sub(r'[^A-Za-z0-9]', '_', revision)}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, f"{revision}:{GENERATORS_PATH}", "exec"), module.__dict__)  # noqa: S102
    return module.ExtractiveGenerator


def answer_rows(generate, asked: list[dict], label: str) -> list[dict]:
    """``generate(query, documents)`` on each question's fused documents."""
    from parallel_rag.studio.evaluation import DOC_ID_KEY

    rows = []
    started = time.perf_counter()
    for i, row in enumerate(asked, start=1):
        generated = generate(row["query"], row["documents"])
        ids = [str(d["metadata"][DOC_ID_KEY]) for d in row["documents"]]
        rows.append(
            {
                "id": row["id"],
                "retrieved": row["retrieved"],
                "answer": generated.answer,
                "cited": [ids[n - 1] for n in generated.cited_numbers],
            }
        )
        if i % 10 == 0 and time.perf_counter() - started > 60:
            log(f"[{label}] {i}/{len(asked)} ({time.perf_counter() - started:.0f}s)")
    return rows


def llm_rows(asked: list[dict], log_path: Path) -> tuple[list[dict], float, str]:
    """The LLM generator (SmolLM2, temperature 0) on the given questions."""
    from parallel_rag.graph.components import make_generator
    from parallel_rag.graph.configuration import GeneratorConfig

    from bench.offline_llm import llama_server, offline_llm_available

    why_not = offline_llm_available()
    if why_not:
        raise RuntimeError(why_not)
    with llama_server(log_path) as base_url:
        settings = {
            "model": "smollm2",
            "base_url": base_url,
            "temperature": 0,
            "max_tokens": 200,
            "timeout_seconds": 300,
        }
        generator = make_generator(GeneratorConfig(kind="llm", llm=settings), None)
        started = time.perf_counter()
        rows = answer_rows(generator.generate, asked, "llm")
        seconds = (time.perf_counter() - started) / max(len(asked), 1)
    return rows, seconds, "SmolLM2-135M-Instruct (llama.cpp server, temperature 0)"


# -- report --------------------------------------------------------------------------------

COLUMNS = (
    ("answer recall", "recall"),
    ("answer first", "answer_first"),
    ("retrieval ceiling", "ceiling"),
    ("recall / ceiling", "of_ceiling"),
    ("citation support", "citation_support"),
    ("citation precision", "citation_precision"),
    ("median words", "median_words"),
    ("mean words", "mean_words"),
)


def table(rows: list[dict[str, Any]]) -> str:
    """One line per generator row of ``measure``."""
    header = "| generator | questions (non yes/no) | " + " | ".join(c for c, _ in COLUMNS) + " |"
    lines = [header, "| --- | ---: |" + " ---: |" * len(COLUMNS)]
    for metrics in rows:
        cells = []
        for _, key in COLUMNS:
            value = metrics[key]
            cells.append(f"{value:.1f}" if key.endswith("words") else f"{value:.3f}")
        counts = f"{metrics['questions']} ({metrics['answerable']})"
        lines.append(f"| {metrics['generator']} | {counts} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def measure(
    data: HotpotQA,
    first: int,
    last: int,
    *,
    index_dir: Path = WORK / "hotpotqa",
    top_k: int = 10,
    before: Sequence[str] = (BEFORE_REV,),
    llm_questions: int = 0,
    rewriter: str | None = None,
    documents: Path | None = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """Questions ``first``-``last`` (1-based) asked through ``build_graph()`` on the embedded
    defaults (index under ``index_dir``), then answered by each generator on the same fused
    documents. Returns ``{"questions", "top_k", "docs", "rows", "notes"}``, each row a
    generator's label and ``score``. ``documents``: an earlier run's fused documents instead of
    asking. A ``before`` revision this checkout does not hold is left out with a note."""
    questions = data.questions[first - 1 : last]
    by_id = {q["_id"]: q for q in questions}
    WORK.mkdir(parents=True, exist_ok=True)
    index_dir.mkdir(parents=True, exist_ok=True)
    cache = EmbeddingCache(OUT_DIR / "cache")
    config = default_config()
    asked_config = config
    if rewriter is not None:
        from parallel_rag.graph.loading import default_config_dict, parse_config

        settings = {**default_config_dict(), "rewriter": {"kind": rewriter}}
        asked_config = parse_config(settings, source=f"embedded defaults + {rewriter}")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []

    def add(label: str, answered: list[dict]) -> None:
        rows.append({"generator": label, **score(answered, by_id, data.corpus)})

    with installed(cache) as embeddings:
        from parallel_rag.graph.builder import build_graph

        if documents is not None:
            asked = json.loads(documents.read_text())
            if [row["id"] for row in asked] != [q["_id"] for q in questions]:
                raise ValueError(f"{documents}: not questions {first}-{last}")
            log(f"[ask] questions {first}-{last}: fused documents from {documents}")
        else:
            ensure_index(data, config, index_dir, log=log)
            graph = build_graph(asked_config, base_dir=index_dir)
            log(f"[ask] questions {first}-{last} through build_graph() (top_k {top_k})")
            asked = retrieve(graph, asked_config, questions, top_k, fresh, index_dir.parent)
        for row in asked:
            row["query"] = by_id[row["id"]]["question"]
        for revision in before:
            try:
                old = generator_at(revision)(embeddings=lambda: embeddings)
            except (OSError, subprocess.CalledProcessError):
                notes.append(f"Generator before ({revision}) not measured: no such revision here.")
                log(notes[-1])
                continue
            add(f"extractive, before ({revision})", answer_rows(old.generate, asked, "before"))
        from parallel_rag.graph.components import make_generator

        # the generator the graph's generate node runs, on the documents it was given
        default = make_generator(config.generator, None, config.embeddings)
        after = answer_rows(default.generate, asked, "default")
        asked_with = f", asked with the {rewriter} rewriter" if rewriter else ""
        add(f"extractive, default ({git_head()}){asked_with}", after)
        if llm_questions:
            subset = asked[:llm_questions]
            try:
                llm, seconds, label = llm_rows(subset, WORK / "llama-server.log")
            except Exception as error:  # noqa: BLE001 - the table says why the row is missing
                notes.append(f"LLM generator not measured: {error}")
                log(notes[-1])
            else:
                n = len(subset)
                add(f"extractive, default, same {n} questions", after[:n])
                add(f"LLM: {label}, first {n}", llm)
                notes.append(f"LLM generator: {seconds:.1f} s per answer on this machine.")
        cache.flush()
    return {
        "questions": f"{first}-{last}",
        "top_k": top_k,
        "docs": len(data.corpus),
        "rows": rows,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", default="101-500", help="1-based range (default 101-500)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--before",
        action="append",
        default=None,
        help=f"git revision whose generator to compare with (repeatable; default {BEFORE_REV})",
    )
    parser.add_argument("--no-before", action="store_true")
    parser.add_argument("--llm-questions", type=int, default=20, help="0: no LLM rows")
    parser.add_argument("--fresh", action="store_true", help="ask the graph again")
    parser.add_argument(
        "--documents",
        type=Path,
        default=None,
        help="answer from the fused documents this earlier run stored (an asked-*.json under "
        "bench/out/answers) instead of asking the graph: generators compared on the same "
        "documents, in seconds",
    )
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write")
    parser.add_argument(
        "--rewriter",
        choices=("prf",),
        default=None,
        help="ask with this model-free rewriter on (the index is the defaults' either way)",
    )
    args = parser.parse_args(argv)

    try:
        data = load_hotpotqa()
    except DataMissing as error:
        print(error, file=sys.stderr)
        return 2
    first, last = parse_range(args.questions)
    try:
        measured = measure(
            data,
            first,
            last,
            top_k=args.top_k,
            before=[] if args.no_before else args.before or [BEFORE_REV],
            llm_questions=args.llm_questions,
            rewriter=args.rewriter,
            documents=args.documents,
            fresh=args.fresh,
        )
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    text = table(measured["rows"])
    print(text)
    for note in measured["notes"]:
        print(note)
    out = args.out or (RESULTS_MD if (first, last) == (101, 500) else None)
    if out is not None:
        write_markdown(out, text, measured["notes"], first, last, args.top_k, len(data.corpus))
        log(f"wrote {out}")
    return 0


def git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", GENERATE_DIR],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "working tree"
    return head + ("+edits" if dirty else "")


def write_markdown(
    path: Path, text: str, notes: list[str], first: int, last: int, top_k: int, docs: int
) -> None:
    body = [
        "# Answer quality: HotpotQA dev500",
        "",
        f"Questions {first}–{last} (questions 1–100 are for tuning), {docs} pooled paragraphs, "
        f"asked through `build_graph()` on the embedded defaults with `top_k` {top_k}; every "
        "generator answers from the same fused documents. Written by `python -m bench.answers`.",
        "",
        "- **answer recall**: a gold answer string occurs in the answer (case-insensitive); "
        "yes/no questions excluded; **answer first**: one occurs before the answer's first "
        "citation mark (the answer opens with it).",
        "- **retrieval ceiling**: a gold answer string occurs in some fused top-k paragraph "
        "(the most an extractive answer can reach).",
        "- **citation support**: the answer cites a gold supporting paragraph (answers that cite "
        "something); **citation precision**: cited paragraphs that are gold.",
        "- **words**: answer length, citation markers not counted.",
        "",
        text,
        "",
    ]
    body += [f"{note}" for note in notes]
    kept = ""
    if path.is_file():  # the hand-written findings below the table survive a re-run
        previous = path.read_text(encoding="utf-8")
        if FINDINGS in previous:
            kept = "\n" + previous[previous.index(FINDINGS) :]
    path.write_text("\n".join(body).rstrip() + "\n" + kept, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
