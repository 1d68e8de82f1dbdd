"""The fake pair scorer the offline tests hand to ``build_graph(..., scorer=...)`` (and to
``make_rerank_node``) instead of a model: scores come from a table, a document's length, or a
fixed list; it can fail on demand, and it records every call."""

from __future__ import annotations

import threading

import numpy as np


class FakeScorer:
    """Scores each document text by ``table`` (else ``default``), or by its length with
    ``by_length``, or returns ``values`` as they are (any count, any value: for the tests of bad
    scorer output); raises ``fail`` when set. ``as_numpy`` answers a float32 array, as the model
    scorers do. ``calls`` holds every (query, documents) pair it was asked, from any thread."""

    def __init__(
        self,
        table: dict[str, float] | None = None,
        *,
        default: float = 0.0,
        by_length: bool = False,
        values: list[float] | None = None,
        fail: BaseException | None = None,
        as_numpy: bool = False,
    ):
        self.table = table or {}
        self.default = default
        self.by_length = by_length
        self.values = values
        self.fail = fail
        self.as_numpy = as_numpy
        self.calls: list[tuple[str, list[str]]] = []
        self.lock = threading.Lock()

    def score(self, query: str, documents: list[str]) -> list[float]:
        with self.lock:
            self.calls.append((query, list(documents)))
        if self.fail is not None:
            raise self.fail
        if self.values is not None:
            scores = list(self.values)[: len(documents)]
        elif self.by_length:
            scores = [float(len(text)) for text in documents]
        else:
            scores = [self.table.get(text, self.default) for text in documents]
        return np.asarray(scores, dtype=np.float32) if self.as_numpy else scores
