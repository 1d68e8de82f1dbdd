"""The commands over an indexed corpus: ``ingest`` (files into every index), ``eval`` (scores on
a BEIR-layout collection) and ``tune`` (the fusion fitted without labels)."""

from __future__ import annotations

import argparse
import json
import sys

from parallel_rag.studio.cli.common import require_extra_for, resolve_config_of


def cmd_ingest(args: argparse.Namespace) -> int:
    from parallel_rag.studio.ingestion import ingest_paths

    resolved = resolve_config_of(args)
    metadata = {}
    for item in args.metadata or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--metadata: expected KEY=VALUE, got {item!r}")
        metadata[key] = value
    report = ingest_paths(
        args.paths,
        resolved.runnable(),
        resolved.base_dir,
        progress=not args.quiet,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        extra_metadata=metadata or None,
        store=args.store,
        skip_bad_files=args.skip_bad_files,
        max_file_mb=args.max_file_mb,
        fit=not args.no_tune,
    )
    for line in report.skipped:
        print(f"skipped {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        unchanged = ", ".join(report.unchanged)
        unchanged = f"; already up to date: {unchanged}" if unchanged else ""
        print(
            f"ingested {len(report.files)} file(s), {report.chunks} chunk(s) into "
            f"{', '.join(report.indexes)}{unchanged}"
        )
        if report.fusion:
            print(report.fusion)
        if args.timings:
            print(report.timings.table())
    if resolved.router is not None:  # a shared cache is emptied on every replica
        from parallel_rag.studio.router.cache import invalidate_everywhere

        warning = invalidate_everywhere(resolved.router.routing.context_cache)
        if warning:
            print(warning, file=sys.stderr)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    require_extra_for("eval", "eval")
    from parallel_rag.studio.evaluation import evaluate

    if args.queries is not None and args.queries < 1:
        raise ValueError(f"--queries: must be at least 1, got {args.queries}")
    if not 1 <= args.depth <= 1000:
        raise ValueError(f"--depth: must be between 1 and 1000, got {args.depth}")
    pipeline = resolve_config_of(args).runnable()
    folder = Path(args.dataset)
    workdir = Path(args.workdir or Path(".parallel-rag-eval") / folder.resolve().name)
    scores = evaluate(
        folder,
        pipeline,
        workdir,
        split=args.split,
        max_queries=args.queries,
        measures=args.measure or ["nDCG@10", "R@100"],
        depth=args.depth,
        progress=not args.quiet,
    )
    from parallel_rag.studio.evaluation import fusion_account
    from parallel_rag.studio.fusion_fit import account_line

    fusion = fusion_account(pipeline, workdir)  # the settings the fused row ran with
    if args.json:
        print(json.dumps({**scores, "fusion": fusion}, indent=2))
        return 0
    measures = list(next(iter(scores.values())))
    print("| retriever | " + " | ".join(measures) + " |")
    print("|---|" + "---:|" * len(measures))
    for name, row in scores.items():
        print(f"| {name} | " + " | ".join(f"{row[m]:.4f}" for m in measures) + " |")
    print(account_line(fusion))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from parallel_rag.graph.fitted_fusion import configures_fusion
    from parallel_rag.studio.fusion_fit import fit_fusion

    resolved = resolve_config_of(args)
    pipeline = resolved.runnable()
    report = fit_fusion(pipeline, resolved.base_dir, queries=args.queries, seed=args.seed)
    if args.json:
        print(json.dumps({**report.record, "path": str(report.path)}, indent=2))
        return 0
    print(f"{report.summary()}\nwritten to {report.path}")
    if configures_fusion(pipeline):
        print("the configuration's fusion: block overrides it: remove the block to use the fit")
    return 0
