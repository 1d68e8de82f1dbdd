"""The router's context cache: per route, retrieved context keyed on everything that changes
it (route, normalised query, filters, tenant, top_k, thresholds, embedding identity, scorer
identity), kept in an LRU with a TTL and emptied when an ingest rewrites the route's stores
(a fingerprint of their files, ``store_generation``)."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parallel_rag.backends.embeddings import BUNDLED, embedding_identity
from parallel_rag.graph.configuration import PipelineConfig


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    invalidations: int = 0


class ContextCache:
    """One route's retrieved context: an LRU of ``max_entries`` entries living ``ttl`` seconds,
    emptied when the route's stores change (``generation``, a fingerprint of their files)."""

    def __init__(self, max_entries: int, ttl: float, clock=time.monotonic):
        self.max_entries, self.ttl, self.clock = max_entries, ttl, clock
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple, tuple[float, Any]] = OrderedDict()
        self._generation: tuple | None = None
        self._lock = threading.Lock()

    def _check_generation(self, generation: tuple) -> None:
        if generation != self._generation:
            if self._generation is not None:
                self.stats.invalidations += 1
            self._entries.clear()
            self._generation = generation

    def get(self, key: tuple, generation: tuple) -> Any | None:
        with self._lock:
            self._check_generation(generation)
            item = self._entries.get(key)
            if item is None or self.clock() - item[0] > self.ttl:
                if item is not None:
                    del self._entries[key]
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return item[1]

    def put(self, key: tuple, generation: tuple, value: Any) -> None:
        with self._lock:
            self._check_generation(generation)
            self._entries[key] = (self.clock(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def normalised_query(query: str) -> str:
    return " ".join(query.casefold().split())


def embedding_name(pipeline: PipelineConfig) -> str:
    return embedding_identity(pipeline.embeddings.model or BUNDLED)


def scorer_name(pipeline: PipelineConfig) -> str | None:
    """The reranker's identity (kind, model, exit, budget), or None without one."""
    reranker = pipeline.reranker
    if reranker is None:
        return None
    model = reranker.model or (reranker.llm.model if reranker.llm else "")
    return (
        f"{reranker.kind}:{model}:layer={reranker.layer}:dim={reranker.dimension}:"
        f"max_tokens={reranker.max_tokens}:top_k={reranker.top_k}:"
        f"max_candidates={reranker.max_candidates}"
    )


def cache_key(
    route: str, pipeline: PipelineConfig, query: str, rag_request: dict[str, Any]
) -> tuple:
    """What the context of ``rag_request`` on ``route`` depends on."""
    thresholds = tuple((entry.name, entry.similarity_threshold) for entry in pipeline.retrievers)
    return (
        route,
        normalised_query(query),
        json.dumps(rag_request.get("filters") or {}, sort_keys=True),
        rag_request.get("tenant"),
        rag_request["top_k"],
        thresholds,
        embedding_name(pipeline),
        scorer_name(pipeline),
    )


def store_generation(locations: list[Path]) -> tuple:
    """A fingerprint that changes when an ingest rewrites any of ``locations``: the
    (path, size, mtime) of each file (a folder: of the files in it, recursively)."""
    marks: list[tuple[str, int, int]] = []
    for location in locations:
        try:
            if location.is_dir():
                for item in sorted(location.rglob("*")):
                    if item.is_file() and not item.name.endswith((".lock", ".tmp")):
                        stat = item.stat()
                        marks.append((str(item), stat.st_size, stat.st_mtime_ns))
            elif location.exists():
                stat = location.stat()
                marks.append((str(location), stat.st_size, stat.st_mtime_ns))
            else:
                marks.append((str(location), -1, 0))
        except OSError:
            marks.append((str(location), -2, 0))
    return tuple(marks)
