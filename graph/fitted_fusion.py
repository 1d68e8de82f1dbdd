"""Which fusion settings a graph runs: the configuration's, the fitted ones, or the shipped
defaults; and the fit file they are read from.

``studio/fusion_fit.py`` fits fusion to the corpus in the stores and writes its choice to
``fit_path`` (``fusion-fit.json`` beside the first store, e.g. ``.parallel-rag/``). The order,
one rule for every surface:

1. a run's fusion knob (``fusion_method``, ``fusion_k``, ``fusion_weights``) adjusts the
   configured settings for that run, as it always did (``nodes/fuse.py`` ``make_fuse_node``);
2. else a configuration whose ``fusion:`` block sets anything fuses as it says;
3. else the fit, when one was made for these retrievers (same names and kinds);
4. else the shipped defaults, with a note saying why (not fitted yet, corpus too small...).

``FittedFusion`` reads the file again when it changes (one ``stat`` a run), so a server picks
up a fit written by ``parallel-rag tune`` or an ingest without a restart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from parallel_rag.backends.registry import store_locations
from parallel_rag.backends.shared.atomic_files import write_file
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.nodes.fuse import FUSION_METHODS, FusionPlan

FIT_FILE = "fusion-fit.json"
FIT_VERSION = 1
NOT_FITTED = "not fitted to this corpus yet (parallel-rag tune fits it)"


def fit_path(pipeline: PipelineConfig, root: Path) -> Path | None:
    """Where the fit of ``pipeline``'s stores lives: beside its first local store; None when
    every store is remote."""
    locations = store_locations(pipeline.retrievers, root)
    return locations[0].parent / FIT_FILE if locations else None


def write_fit(path: Path, record: dict[str, Any]) -> None:
    """Write a fit record in one step (readers see the old or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(record, indent=2) + "\n")


def read_fit(path: Path | None) -> dict[str, Any] | None:
    """The fit record at ``path``; None when there is none or it is unreadable."""
    if path is None:
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def configured_plan(pipeline: PipelineConfig, dense: Iterable[str]) -> FusionPlan:
    """The configuration's fusion (the shipped defaults when it sets none)."""
    fusion = pipeline.fusion
    return FusionPlan(
        method=fusion.method,
        k=fusion.k,
        weights=fusion.weights_for(sorted(dense)),
        source="configuration" if configures_fusion(pipeline) else "default",
    )


def configures_fusion(pipeline: PipelineConfig) -> bool:
    """Whether the configuration's ``fusion:`` block sets anything (then no fit is used)."""
    return bool(pipeline.fusion.model_fields_set)


def plan_from_record(
    record: dict[str, Any] | None, names: Iterable[str], dense: Iterable[str], default: FusionPlan
) -> FusionPlan:
    """The plan a fit record gives the retrievers ``names`` (``dense`` among them):
    its settings when it fitted these retrievers, else ``default`` with a note."""
    if record is None:
        return FusionPlan(**{**_fields(default), "note": NOT_FITTED})
    if record.get("version") != FIT_VERSION:
        return FusionPlan(**{**_fields(default), "note": f"{NOT_FITTED}: the fit is outdated"})
    kinds = {n: "dense" if n in set(dense) else "lexical" for n in names}
    if record.get("retrievers") != kinds:
        note = f"the fit is for other retrievers ({record.get('retrievers')}); tune again"
        return FusionPlan(**{**_fields(default), "note": note})
    settings = record.get("settings") or {}
    weights = settings.get("weights")
    if record.get("status") != "fitted" or settings.get("method") not in FUSION_METHODS:
        reason = record.get("reason") or "not fitted"
        return FusionPlan(**{**_fields(default), "note": reason})
    if not isinstance(weights, dict) or set(weights) != set(kinds):
        return FusionPlan(**{**_fields(default), "note": "the fit has no weights for these"})
    evidence = record.get("evidence") or {}
    fit = {
        "fitted_at": record.get("fitted_at"),
        "pseudo_queries": evidence.get("pseudo_queries"),
        "score": evidence.get("chosen_score"),
        "default_score": evidence.get("default_score"),
    }
    return FusionPlan(
        method=settings["method"],
        k=int(settings.get("k", default.k)),
        weights={n: float(w) for n, w in weights.items()},
        source="fitted",
        note=record.get("note"),
        fit=fit,
    )


def _fields(plan: FusionPlan) -> dict[str, Any]:
    return {
        "method": plan.method,
        "k": plan.k,
        "weights": dict(plan.weights),
        "source": plan.source,
    }


class FittedFusion:
    """The plan a run without fusion knobs uses, from the fit file (re-read when it changes:
    one ``stat`` per call)."""

    def __init__(self, path: Path | None, names: Iterable[str], dense: Iterable[str],
                 default: FusionPlan):  # fmt: skip
        self.path, self.names, self.dense, self.default = path, list(names), set(dense), default
        self._stamp: tuple[int, int] | None = None
        self._plan = plan_from_record(None, self.names, self.dense, default)

    def __call__(self) -> FusionPlan:
        try:
            info = os.stat(self.path) if self.path is not None else None
            stamp = (info.st_mtime_ns, info.st_size) if info is not None else None
        except OSError:
            stamp = None
        if stamp != self._stamp:
            record = read_fit(self.path) if stamp is not None else None
            self._plan = plan_from_record(record, self.names, self.dense, self.default)
            self._stamp = stamp
        return self._plan


def fusion_plan(
    pipeline: PipelineConfig, root: Path, names: Iterable[str], dense: Iterable[str]
) -> FittedFusion | None:
    """What a graph's fuse node uses for runs without fusion knobs: None when the
    configuration sets its fusion (it then always fuses as configured), else the fit for the
    graph's retrievers ``names`` (``dense`` among them; code-supplied ones included)."""
    if configures_fusion(pipeline):
        return None
    dense = list(dense)
    default = configured_plan(pipeline, dense)
    return FittedFusion(fit_path(pipeline, root), names, dense, default)


def current_plan(pipeline: PipelineConfig, root: Path) -> FusionPlan:
    """The plan a run without fusion knobs would use now (for previews and reports)."""
    names = [e.name for e in pipeline.retrievers]
    dense = [e.name for e in pipeline.retrievers if e.is_dense]
    fitted = fusion_plan(pipeline, root, names, dense)
    return fitted() if fitted is not None else configured_plan(pipeline, dense)
