"""The best ``k`` documents of a score array, shared by both engines: only documents with
score > 0 (and passing the metadata filter) are candidates; they are ordered by descending
score, ties broken by the lower corpus position (the order the chunks were given in). Same
analyzer + same variant + same selection therefore gives the same ranking on both engines.
"""

from __future__ import annotations

import numpy as np


def select_top_k(
    scores: np.ndarray, k: int, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Positions and scores of the best ``k`` documents with score > 0 (and ``mask`` True).

    Ordered by descending score, ties broken by the lower position. Shared by both engines.
    """
    if k <= 0 or scores.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=scores.dtype)
    valid = scores > 0
    if mask is not None:
        valid &= mask
    positions = _top_k_candidates(scores, valid, mask, k)
    selected = scores[positions]
    if positions.size > k:
        # Keep everything tied with the k-th best score, so the tie-break below decides.
        threshold = np.partition(selected, positions.size - k)[positions.size - k]
        keep = selected >= threshold
        positions, selected = positions[keep], selected[keep]
    # ``positions`` is ascending, so a stable sort on -score breaks ties by lower position.
    order = np.argsort(-selected, kind="stable")[:k]
    return positions[order], selected[order]


_BLOCKS_PER_K = 16
"""Blocks of the score array per wanted hit when bounding the k-th best score from below."""

_MIN_BLOCK = 256
"""Below this block size the candidates are simply every valid position."""


def _top_k_candidates(
    scores: np.ndarray, valid: np.ndarray, mask: np.ndarray | None, k: int
) -> np.ndarray:
    """Ascending positions of valid scores that may be among the best ``k``: every valid
    position whose score is at least the ``k``-th best, ties included.

    On a large array the ``k``-th largest of the per-block maxima bounds the ``k``-th best
    score from below (those maxima are ``k`` distinct valid scores), so only the positions at
    or above it are kept: a few hundred instead of every document that matched a query term
    (often half the corpus), which spares the partition over all of them.
    """
    block = scores.size // (_BLOCKS_PER_K * k)
    if block < _MIN_BLOCK:
        return np.flatnonzero(valid)
    # masked-out scores become 0; a bound > 0 then only comes from valid scores
    work = scores if mask is None else scores * mask
    whole = scores.size // block * block
    maxima = work[:whole].reshape(-1, block).max(axis=1)
    if whole < scores.size:
        maxima = np.append(maxima, work[whole:].max())
    bound = np.partition(maxima, maxima.size - k)[maxima.size - k]
    if not bound > 0:  # fewer than k blocks hold a valid score: at most k blocks of them
        return np.flatnonzero(valid)
    return np.flatnonzero(work >= bound)
