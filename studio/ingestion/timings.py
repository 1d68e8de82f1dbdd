"""Wall and CPU time per ingest stage, so ``parallel-rag ingest --timings`` (and ``--json``)
can say where an ingest's time went instead of one total: the encoder, the stores and the
converters scale differently, and a bench (``bench/ingest_throughput.py --ratio``) weighs each
against what it buys.

CPU is the process's (``time.process_time``: every thread, so the encoder's own threads count
toward the stage that called it). Stages run one after another in the calling thread and are
never nested, so the stages add up to the run's total less what no stage covers (``other``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StageTime:
    """One stage's totals over a run: seconds of wall and CPU, and how many items it handled
    (files, chunks, sentences: what the stage counts)."""

    wall: float = 0.0
    cpu: float = 0.0
    items: int = 0


@dataclass
class StageTimings:
    """Each stage's ``StageTime`` in the order stages first ran, and the whole run's."""

    stages: dict[str, StageTime] = field(default_factory=dict)
    total: StageTime = field(default_factory=StageTime)
    _open: str | None = None

    @contextmanager
    def stage(self, name: str, items: int = 0) -> Iterator[StageTime]:
        """Time the block as stage ``name`` (added to earlier runs of it); the yielded
        ``StageTime``'s ``items`` may be raised inside the block."""
        if self._open is not None:
            raise RuntimeError(f"stage {name!r} started inside stage {self._open!r}")
        entry = self.stages.setdefault(name, StageTime())
        entry.items += items
        self._open = name
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield entry
        finally:
            entry.wall += time.perf_counter() - wall
            entry.cpu += time.process_time() - cpu
            self._open = None

    @contextmanager
    def run(self) -> Iterator[None]:
        """Time the whole run (``total``)."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.total.wall += time.perf_counter() - wall
            self.total.cpu += time.process_time() - cpu

    def other(self) -> StageTime:
        """What no stage covers: the total less the stages (imports are outside both)."""
        return StageTime(
            wall=max(0.0, self.total.wall - sum(s.wall for s in self.stages.values())),
            cpu=max(0.0, self.total.cpu - sum(s.cpu for s in self.stages.values())),
        )

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{stage: {"wall_s", "cpu_s", "items"}}`` with ``other`` and ``total`` last (for
        ``--json``)."""
        rows = {**self.stages, "other": self.other(), "total": self.total}
        return {
            name: {"wall_s": round(t.wall, 3), "cpu_s": round(t.cpu, 3), "items": t.items}
            for name, t in rows.items()
        }

    def table(self) -> str:
        """The timings as aligned text lines, one per stage (for ``--timings``)."""
        rows = self.as_dict()
        width = max(len(name) for name in rows)
        lines = [f"{'stage':<{width}}  {'wall s':>8}  {'CPU s':>8}  {'items':>8}"]
        for name, row in rows.items():
            items = str(row["items"]) if row["items"] else ""
            lines.append(
                f"{name:<{width}}  {row['wall_s']:>8.2f}  {row['cpu_s']:>8.2f}  {items:>8}"
            )
        return "\n".join(lines)
