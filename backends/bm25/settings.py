"""The ``backend_config`` of a ``bm25`` retriever entry: pydantic and the standard library only,
so the configuration schema can hold it without importing the index code (bm25s, numpy,
rank-bm25), which ``retriever.py`` imports when a configuration builds a ``bm25`` branch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from parallel_rag.backends.base import resolve_path
from pydantic import BaseModel, ConfigDict, Field, field_validator

Engine = Literal["bm25s", "rank_bm25"]
"""Scoring engines; both implement the same Lucene BM25 variant."""

ENGINES: tuple[str, ...] = ("bm25s", "rank_bm25")
DEFAULT_INDEX_PATH = ".parallel-rag/bm25"


class BM25Settings(BaseModel):
    """``backend_config`` of a ``bm25`` retriever entry in the parallel-rag config."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    index_path: str = Field(
        default=DEFAULT_INDEX_PATH,
        min_length=1,
        description="Index directory; relative paths are resolved by the caller.",
    )
    engine: Engine = Field(default="bm25s", description="Scoring engine (same BM25 variant).")
    k1: float = Field(default=1.5, gt=0, description="BM25 term-frequency saturation.")
    b: float = Field(default=0.75, ge=0, le=1, description="BM25 length normalisation.")
    auto_reload: bool = Field(
        default=True,
        description="Before each query, load a newer save of the index (one stat of its "
        "manifest); false keeps the index loaded first until reload().",
    )

    @field_validator("index_path", mode="before")
    @classmethod
    def coerce_index_path(cls, value: Any) -> Any:
        """Accept ``pathlib.Path`` values as well as strings."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    def index_dir(self, base_dir: Path | None = None) -> Path:
        """The index directory; a relative ``index_path`` starts at ``base_dir``."""
        return resolve_path(self.index_path, base_dir)
