"""BM25 scoring for both engines, and the bm25s model built from term-id arrays.

Scoring variant
    Both engines score with the *Lucene* BM25 variant (Kamphuis et al., ECIR 2020)::

        idf(t)    = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
        score(d)  = sum over query terms t of  idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))

    Engine ``bm25s`` is bm25s with ``method="lucene"`` (scores precomputed into a sparse
    term x document matrix, float64). Engine ``rank_bm25`` is rank-bm25's ``BM25Okapi`` with
    ``_calc_idf`` overridden to the Lucene idf (no epsilon floor) and its scores divided by
    ``k1 + 1``, because rank-bm25 keeps the classic ``(k1 + 1)`` factor in the numerator that
    Lucene (and bm25s's "lucene" method) dropped. The factor is a constant, so dividing by it
    only makes the two engines' scores numerically equal, not just equally ordered.

Building streams: each chunk is analyzed on its own and its term ids appended to one compact
int32 buffer (no per-token Python objects survive), and the bm25s score matrix is built from
those arrays a batch of documents at a time (``bm25s_score_arrays``), straight into its final
CSC arrays. The result is identical, array for array, to bm25s's own ``BM25.index`` on the same
term ids; peak memory is the finished index plus one batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import bm25s
import numpy as np
import rank_bm25
from parallel_rag.backends.bm25.settings import ENGINES

BM25_VARIANT = "lucene"

_SCORE_DTYPE = "float64"

_BUILD_BATCH_TOKENS = 1 << 19
"""Tokens per batch while building the score matrix: bounds the build's temporary arrays."""


class LuceneBM25Okapi(rank_bm25.BM25Okapi):
    """rank-bm25's ``BM25Okapi`` turned into the Lucene variant.

    * ``_calc_idf``: Lucene idf ``ln(1 + (N - n + 0.5) / (n + 0.5))`` (always positive, so
      rank-bm25's epsilon floor for negative idf never applies);
    * ``get_scores``: rank-bm25's scores divided by ``k1 + 1`` (Lucene has no ``(k1 + 1)``
      numerator factor).
    """

    def _calc_idf(self, nd: Mapping[Any, int]) -> None:
        n_docs = self.corpus_size
        for term, df in nd.items():
            self.idf[term] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        self.average_idf = sum(self.idf.values()) / len(self.idf) if self.idf else 0.0

    def get_scores(self, query: Sequence[Any]) -> np.ndarray:
        return super().get_scores(query) / (self.k1 + 1.0)


def _token_batches(offsets: np.ndarray, budget: int) -> Iterable[tuple[int, int]]:
    """``(first, end)`` document ranges of about ``budget`` tokens each (at least one doc)."""
    n_docs = offsets.size - 1
    first = 0
    while first < n_docs:
        end = int(np.searchsorted(offsets, offsets[first] + budget, side="right")) - 1
        end = min(max(end, first + 1), n_docs)
        yield first, end
        first = end


def _doc_term_counts(
    token_ids: np.ndarray, offsets: np.ndarray, first: int, end: int, n_terms: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (document, term) pairs of documents ``first..end`` with their term frequency,
    ordered by document then term id."""
    lengths = np.diff(offsets[first : end + 1])
    local = np.repeat(np.arange(end - first, dtype=np.int64), lengths)
    keys = local * n_terms + token_ids[offsets[first] : offsets[end]]
    pairs, counts = np.unique(keys, return_counts=True)
    docs, terms = np.divmod(pairs, n_terms)
    return docs + first, terms, counts


def bm25s_score_arrays(
    token_ids: np.ndarray, offsets: np.ndarray, n_terms: int, k1: float, b: float
) -> dict[str, Any]:
    """bm25s's ``scores`` (``data``, ``indices``, ``indptr``, ``num_docs``) for the Lucene
    variant, from the corpus as one term-id array plus per-document offsets.

    The same numbers as ``bm25s.BM25(method="lucene").index`` over per-document id lists, in
    the same CSC layout (term columns, documents ascending within a column), computed with
    the same floating-point operations in the same order, but without any per-token Python
    object: a first pass over document batches counts document frequencies, a second one
    scores each batch and writes it straight into the preallocated CSC arrays.
    """
    n_docs = offsets.size - 1
    lengths = np.diff(offsets)
    avg_doc_len = lengths.mean() if n_docs else 0.0
    batches = list(_token_batches(offsets, _BUILD_BATCH_TOKENS))
    doc_freqs = np.zeros(n_terms, dtype=np.int64)
    for first, end in batches:
        _, terms, _ = _doc_term_counts(token_ids, offsets, first, end, n_terms)
        doc_freqs += np.bincount(terms, minlength=n_terms)
    idf = np.zeros(n_terms, dtype=_SCORE_DTYPE)
    for term, df in enumerate(doc_freqs.tolist()):
        if df:
            idf[term] = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(doc_freqs, out=indptr[1:])
    data = np.empty(int(indptr[-1]), dtype=_SCORE_DTYPE)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    heads = indptr[:-1].copy()  # next free slot of each term's column
    for first, end in batches:
        docs, terms, counts = _doc_term_counts(token_ids, offsets, first, end, n_terms)
        tf = counts.astype(_SCORE_DTYPE)
        tfc = tf / (k1 * ((1 - b) + b * lengths[docs] / avg_doc_len) + tf)
        scores = idf[terms] * tfc
        order = np.argsort(terms, kind="stable")  # by term, documents still ascending
        sorted_terms = terms[order]
        rank = np.arange(order.size) - np.searchsorted(sorted_terms, sorted_terms)
        slots = heads[sorted_terms] + rank
        data[slots] = scores[order]
        indices[slots] = docs[order]
        heads += np.bincount(terms, minlength=n_terms)
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}


class _TermIdCorpus(NamedTuple):
    """What ``bm25s.BM25.index`` accepts as a pre-tokenised corpus object (``ids``, ``vocab``),
    with ``ids`` the compact ``(token_ids, offsets)`` arrays."""

    ids: tuple[np.ndarray, np.ndarray]
    vocab: dict[str, int]


class _CompactBM25(bm25s.BM25):
    """bm25s.BM25 whose index is built from term-id arrays (``bm25s_score_arrays``), through
    the ``build_index_from_ids`` hook bm25s documents for overriding. Only the build differs:
    the saved files and the scores are bm25s's own."""

    def build_index_from_ids(
        self, unique_token_ids, corpus_token_ids, show_progress=True, leave_progress=False
    ):
        token_ids, offsets = corpus_token_ids
        self.nonoccurrence_array = None  # the Lucene variant has none
        return bm25s_score_arrays(token_ids, offsets, len(unique_token_ids), self.k1, self.b)


def bm25s_model(
    token_ids: np.ndarray, offsets: np.ndarray, term_ids: Mapping[str, int], k1: float, b: float
) -> bm25s.BM25:
    """The bm25s model of a corpus given as term-id arrays (see ``_CompactBM25``)."""
    model = _CompactBM25(
        k1=k1,
        b=b,
        method=BM25_VARIANT,
        idf_method=BM25_VARIANT,
        dtype=_SCORE_DTYPE,
        backend="numpy",
        csc_backend="numpy",
    )
    model.index(
        _TermIdCorpus((token_ids, offsets), dict(term_ids)),
        create_empty_token=False,
        show_progress=False,
    )
    return model


def check_params(engine: str, k1: float, b: float) -> None:
    if engine not in ENGINES:
        raise ValueError(f"unknown BM25 engine {engine!r}; expected one of {ENGINES}")
    if not k1 > 0:
        raise ValueError(f"k1 must be > 0, got {k1}")
    if not 0 <= b <= 1:
        raise ValueError(f"b must be within [0, 1], got {b}")
