"""BM25 lexical backend: an on-disk index and a LangChain retriever over it.

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

Query terms
    A query is analyzed with the analyzer the index was built with, then *de-duplicated*
    (first occurrence kept) and stripped of terms absent from the vocabulary, identically for
    both engines: a repeated query word counts once (set semantics, like a bag-of-words
    ``OR`` query with unit weights).

Top-k selection
    Shared by both engines: only documents with score > 0 and passing the metadata equality
    filter are candidates; they are ordered by descending score, ties broken by the lower
    corpus position (the order the chunks were given in). Same analyzer + same variant + same
    selection therefore gives the same ranking on both engines.

On-disk layout (one directory)::

    manifest.json       format version, analyzer, k1, b, variant, sizes
    chunks.jsonl        one {"id", "content", "metadata"} object per chunk, corpus order
    vocab.json          list of terms; a term's position is its term id
    token_ids.npy       int32, every chunk's term ids concatenated (corpus order)
    token_offsets.npy   int64, N + 1 offsets into token_ids.npy
    bm25s/              the bm25s model, written by ``bm25s.BM25.save`` (absent if no terms)

Building streams: each chunk is analyzed on its own and its term ids appended to one compact
int32 buffer (no per-token Python objects survive), and the bm25s score matrix is built from
those arrays a batch of documents at a time (``bm25s_score_arrays``), straight into its final
CSC arrays. The result is identical, array for array, to bm25s's own ``BM25.index`` on the same
term ids; peak memory is the finished index plus one batch.

Loading never re-tokenises the corpus: engine ``bm25s`` loads the saved model (or rebuilds it
from the stored term ids when ``k1``/``b`` differ from the stored ones), engine ``rank_bm25``
rebuilds rank-bm25's statistics from the stored term ids. Saving goes through
``atomic_files.write_directory`` (a staging sibling renamed into place), so an interrupted save
never leaves a half-written index.

Picking up a new save
    A long-running reader (a server, a notebook) sees what another process ingests without a
    restart: before each query, :class:`BM25Retriever` compares the stamp of the manifest on
    disk (``index_stamp``: one ``stat``, device, inode, size, mtime and ctime) with the one it
    loaded. Every save writes its manifest last, in a fresh directory renamed into place, so a
    new save always brings a new stamp, and a stamp that has not changed means the loaded
    index is still the saved one. A changed stamp makes the query that noticed it load the new
    save; queries arriving meanwhile answer from the index already loaded. A load is kept only
    if the stamp was the same before and after reading the files, so a save swapped in halfway
    through never yields a mix of two saves. A save that cannot be loaded (corrupt, missing)
    leaves the loaded index serving, with one warning for that save.
"""

from __future__ import annotations

import array
import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import bm25s
import numpy as np
import rank_bm25
from langchain_core.callbacks import (
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BuildRequest,
    ChunkBatch,
    Fingerprint,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    SettingsStore,
    matches_filter,
    scored_document,
)
from parallel_rag.backends.bm25.analysis import (
    ANALYZER_NAMES,
    DEFAULT_ANALYZER,
    AnalyzerName,
    get_analyzer,
)
from parallel_rag.backends.bm25.settings import DEFAULT_INDEX_PATH, ENGINES, BM25Settings, Engine
from parallel_rag.backends.shared.atomic_files import (
    ASIDE_MARK,
    restore_moved_aside,
    write_directory,
)
from parallel_rag.backends.shared.revisions import held_for_run
from pydantic import Field, PrivateAttr, field_validator

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_INDEX_PATH", "ENGINES", "BM25Settings", "Engine"]  # from settings.py

BM25_VARIANT = "lucene"
FORMAT_NAME = "parallel-rag-bm25"
FORMAT_VERSION = 1

MANIFEST_FILE = "manifest.json"
CHUNKS_FILE = "chunks.jsonl"
VOCAB_FILE = "vocab.json"
TOKEN_IDS_FILE = "token_ids.npy"
TOKEN_OFFSETS_FILE = "token_offsets.npy"
BM25S_DIR = "bm25s"

_SCORE_DTYPE = "float64"
_FILTER_CACHE_SIZE = 64
_BUILD_BATCH_TOKENS = 1 << 19
"""Tokens per batch while building the score matrix: bounds the build's temporary arrays."""


# --------------------------------------------------------------------------------------
# Index
# --------------------------------------------------------------------------------------


class BM25Chunk(NamedTuple):
    """One indexed chunk: stable id, text, flat JSON-serialisable metadata."""

    id: str
    content: str
    metadata: dict[str, Any]


class BM25Hit(NamedTuple):
    """A search hit: corpus position, the chunk, its BM25 score (> 0)."""

    position: int
    chunk: BM25Chunk
    score: float


def missing_index_message(path: str | os.PathLike[str]) -> str:
    """The error text for an index directory that does not exist (or is not an index)."""
    where = Path(path)
    shown = str(where) if where.is_absolute() else f"{where} (resolved: {where.absolute()})"
    return f"No BM25 index found at {shown}. Run `parallel-rag ingest` to build it."


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


def normalise_chunks(chunks: Iterable[Any]) -> tuple[BM25Chunk, ...]:
    result: list[BM25Chunk] = []
    seen: set[str] = set()
    for position, chunk in enumerate(chunks):
        try:
            doc_id, content, metadata = chunk
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"chunk #{position}: expected an (id, content, metadata) triple, got {chunk!r}"
            ) from exc
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"chunk #{position}: id must be a non-empty string, got {doc_id!r}")
        if doc_id in seen:
            raise ValueError(f"chunk #{position}: duplicate chunk id {doc_id!r}")
        if not isinstance(content, str):
            raise TypeError(f"chunk {doc_id!r}: content must be a string")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, Mapping):
            raise TypeError(f"chunk {doc_id!r}: metadata must be a mapping")
        seen.add(doc_id)
        result.append(BM25Chunk(doc_id, content, dict(metadata)))
    return tuple(result)


TITLE_WEIGHT = 3
"""How many times a chunk's title counts: a chunk whose text opens with its ``title`` metadata
on a line of its own (a record of a JSONL/CSV file, a BEIR document) has the title's terms
indexed this many times, a field weight as BM25F gives one. Chosen on SciFact train by BM25
alone: nDCG@10 0.6970 / 0.7031 / 0.7059 / 0.7062 / 0.7050 at weights 1-5, so 3, where it stops
rising (bench/FUSION-FIT-RESULTS.md, "Titles")."""


def indexed_text(chunk: BM25Chunk) -> str:
    """The text whose terms index ``chunk``: its content, with its leading title line counted
    ``TITLE_WEIGHT`` times (a title that does not open the content adds nothing: a file's name
    is not its text)."""
    title = chunk.metadata.get("title")
    content = chunk.content
    if (
        TITLE_WEIGHT > 1
        and isinstance(title, str)
        and title.strip()
        and content.startswith(title)
        and content[len(title) : len(title) + 1] in ("\n", "")
    ):
        return "\n".join([title] * (TITLE_WEIGHT - 1) + [content])
    return content


def tokenise(
    chunks: Sequence[BM25Chunk], analyze: Any, term_ids: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' term ids as one array and per-chunk offsets into it; a term not yet in
    ``term_ids`` gets the next id there. One chunk at a time into a compact C-int buffer: no
    per-token object is kept."""
    known = term_ids.__getitem__
    flat = array.array("i")
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    for i, chunk in enumerate(chunks, start=1):
        terms = analyze(indexed_text(chunk))
        try:
            flat.extend(map(known, terms))
        except KeyError:  # a new term: the ids appended before it stay, the rest follow
            for term in terms[len(flat) - int(offsets[i - 1]) :]:
                flat.append(term_ids.setdefault(term, len(term_ids)))
        offsets[i] = len(flat)
    token_ids = np.frombuffer(flat, dtype=np.intc) if flat else np.empty(0, np.intc)
    return token_ids.astype(np.int32, copy=False), offsets


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


def _check_params(engine: str, k1: float, b: float) -> None:
    if engine not in ENGINES:
        raise ValueError(f"unknown BM25 engine {engine!r}; expected one of {ENGINES}")
    if not k1 > 0:
        raise ValueError(f"k1 must be > 0, got {k1}")
    if not 0 <= b <= 1:
        raise ValueError(f"b must be within [0, 1], got {b}")


class BM25Index:
    """An immutable BM25 index over chunks, scored by one of the two engines.

    Build with :meth:`from_chunks` (tokenises once) or :meth:`load` (never tokenises the
    corpus). Thread-safe for concurrent searches.
    """

    def __init__(
        self,
        *,
        chunks: tuple[BM25Chunk, ...],
        vocabulary: list[str],
        token_ids: np.ndarray,
        token_offsets: np.ndarray,
        analyzer: AnalyzerName,
        engine: Engine,
        k1: float,
        b: float,
        bm25s_model: bm25s.BM25 | None = None,
    ) -> None:
        """Internal: use :meth:`from_chunks`, :meth:`load` or :meth:`with_engine`."""
        _check_params(engine, k1, b)
        if analyzer not in ANALYZER_NAMES:
            raise ValueError(f"unknown analyzer {analyzer!r}; expected one of {ANALYZER_NAMES}")
        if token_offsets.shape != (len(chunks) + 1,):
            raise ValueError("token offsets do not match the number of chunks")
        self._chunks = chunks
        self._vocabulary = vocabulary
        self._term_ids = {term: i for i, term in enumerate(vocabulary)}
        self._token_ids = token_ids
        self._token_offsets = token_offsets
        self._analyzer_name: AnalyzerName = analyzer
        self._analyzer = get_analyzer(analyzer)
        self._engine: Engine = engine
        self._k1 = float(k1)
        self._b = float(b)
        self._bm25s: bm25s.BM25 | None = None
        self._rank_bm25: LuceneBM25Okapi | None = None
        self._filter_masks: dict[frozenset[tuple[str, Any]], np.ndarray] = {}
        self._filter_lock = threading.Lock()
        if vocabulary:  # no terms at all: every query scores 0, no engine needed
            if engine == "bm25s":
                self._bm25s = bm25s_model if bm25s_model is not None else self._build_bm25s()
            else:
                self._rank_bm25 = self._build_rank_bm25()

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_chunks(
        cls,
        chunks: Iterable[tuple[str, str, Mapping[str, Any]]],
        *,
        engine: Engine = "bm25s",
        analyzer: AnalyzerName = DEFAULT_ANALYZER,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        """Index ``(id, content, metadata)`` chunks; ids must be unique non-empty strings.

        The corpus is tokenised exactly once. Corpus position (used for tie-breaks) is the
        order of ``chunks``. Metadata must be JSON-serialisable for :meth:`save`.
        """
        _check_params(engine, k1, b)
        normalised = normalise_chunks(chunks)
        term_ids: dict[str, int] = {}
        token_ids, offsets = tokenise(normalised, get_analyzer(analyzer).analyze, term_ids)
        return cls(
            chunks=normalised,
            vocabulary=list(term_ids),
            token_ids=token_ids,
            token_offsets=offsets,
            analyzer=analyzer,
            engine=engine,
            k1=k1,
            b=b,
        )

    def with_engine(
        self, engine: Engine, *, k1: float | None = None, b: float | None = None
    ) -> BM25Index:
        """The same corpus (no re-tokenising) scored by ``engine`` and/or other ``k1``/``b``."""
        k1 = self._k1 if k1 is None else k1
        b = self._b if b is None else b
        reuse = engine == "bm25s" and k1 == self._k1 and b == self._b
        return type(self)(
            chunks=self._chunks,
            vocabulary=self._vocabulary,
            token_ids=self._token_ids,
            token_offsets=self._token_offsets,
            analyzer=self._analyzer_name,
            engine=engine,
            k1=k1,
            b=b,
            bm25s_model=self._bm25s if reuse else None,
        )

    def _corpus_token_id_lists(self) -> list[list[int]]:
        flat = self._token_ids.tolist()
        bounds = self._token_offsets.tolist()
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(self._chunks))]

    def _build_bm25s(self) -> bm25s.BM25:
        return bm25s_model(self._token_ids, self._token_offsets, self._term_ids, self._k1, self._b)

    def _build_rank_bm25(self) -> LuceneBM25Okapi:
        vocab = self._vocabulary  # terms as shared str objects: dict keys cost no extra memory
        corpus = [[vocab[t] for t in ids] for ids in self._corpus_token_id_lists()]
        return LuceneBM25Okapi(corpus, k1=self._k1, b=self._b)

    # -- accessors ---------------------------------------------------------------------

    @property
    def chunks(self) -> tuple[BM25Chunk, ...]:
        """The indexed chunks in corpus order (rebuild with a changed list to update)."""
        return self._chunks

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def analyzer(self) -> AnalyzerName:
        return self._analyzer_name

    @property
    def k1(self) -> float:
        return self._k1

    @property
    def b(self) -> float:
        return self._b

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """Index terms; a term's position is its term id."""
        return tuple(self._vocabulary)

    def chunk_term_ids(self, position: int) -> np.ndarray:
        """Term ids of the chunk at ``position`` (into :attr:`vocabulary`), in text order."""
        start, end = self._token_offsets[position], self._token_offsets[position + 1]
        return self._token_ids[start:end]

    def __len__(self) -> int:
        return len(self._chunks)

    def __repr__(self) -> str:
        return (
            f"BM25Index(chunks={len(self._chunks)}, terms={len(self._vocabulary)}, "
            f"engine={self._engine!r}, analyzer={self._analyzer_name!r}, "
            f"k1={self._k1}, b={self._b})"
        )

    # -- scoring -----------------------------------------------------------------------

    def query_terms(self, query: str) -> list[str]:
        """Analyzed query terms that are in the vocabulary, de-duplicated, first-seen order."""
        term_ids = self._term_ids
        return [t for t in dict.fromkeys(self._analyzer.analyze(query)) if t in term_ids]

    def score_all(self, query: str) -> np.ndarray:
        """The engine's BM25 score of every chunk (float64, corpus order)."""
        terms = self.query_terms(query)
        if terms and self._bm25s is not None:
            ids = np.asarray([self._term_ids[t] for t in terms], dtype=np.int32)
            return np.asarray(self._bm25s.get_scores_from_ids(ids), dtype=np.float64)
        scores = np.zeros(len(self._chunks), dtype=np.float64)
        if terms and self._rank_bm25 is not None:
            scores[:] = self._rank_bm25.get_scores(terms)
        return scores

    def filter_mask(self, filters: MetadataFilter | None) -> np.ndarray | None:
        """Boolean mask of chunks passing the equality filter (None: no filter). Cached."""
        if not filters:
            return None
        try:
            key: frozenset[tuple[str, Any]] | None = frozenset(filters.items())
        except TypeError:  # unhashable filter value: compute, do not cache
            key = None
        if key is not None:
            cached = self._filter_masks.get(key)
            if cached is not None:
                return cached
        mask = np.fromiter(
            (matches_filter(c.metadata, filters) for c in self._chunks),
            dtype=bool,
            count=len(self._chunks),
        )
        mask.flags.writeable = False
        if key is not None:
            with self._filter_lock:
                if len(self._filter_masks) >= _FILTER_CACHE_SIZE:
                    self._filter_masks.pop(next(iter(self._filter_masks)))
                self._filter_masks[key] = mask
        return mask

    def search(
        self, query: str, k: int = 10, filters: MetadataFilter | None = None
    ) -> list[BM25Hit]:
        """Best ``k`` chunks with score > 0 passing ``filters``, best first."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0 or not self._chunks:
            return []
        mask = self.filter_mask(filters)
        if mask is not None and not mask.any():
            return []
        positions, scores = select_top_k(self.score_all(query), k, mask)
        return [
            BM25Hit(int(p), self._chunks[p], float(s))
            for p, s in zip(positions.tolist(), scores.tolist(), strict=True)
        ]

    # -- persistence -------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to directory ``path`` atomically (``atomic_files.write_directory``).

        An existing index at ``path`` is replaced only once the new one is fully written;
        if anything fails, the old index is left untouched and the staging directory removed.
        """
        target = Path(path)
        if target.exists() and not _is_replaceable(target):
            raise FileExistsError(
                f"{target} exists and is not a BM25 index directory; refusing to replace it"
            )
        write_directory(target, self._write)

    def _write(self, directory: Path) -> None:
        _write_chunks(directory / CHUNKS_FILE, self._chunks)
        write_terms(
            directory,
            self._vocabulary,
            self._token_ids,
            self._token_offsets,
            analyzer=self._analyzer_name,
            k1=self._k1,
            b=self._b,
            model=self._bm25s,
        )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        engine: Engine = "bm25s",
        *,
        k1: float | None = None,
        b: float | None = None,
    ) -> BM25Index:
        """Load a saved index for ``engine`` without re-tokenising the corpus.

        ``k1``/``b`` default to the saved values; other values rebuild the scoring stats
        from the stored term ids. Raises ``FileNotFoundError`` if there is no index at
        ``path``.
        """
        directory = Path(path)
        manifest_path = directory / MANIFEST_FILE
        if not manifest_path.is_file():
            raise FileNotFoundError(missing_index_message(directory))
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("format") != FORMAT_NAME or manifest.get("format_version") != (
            FORMAT_VERSION
        ):
            raise ValueError(
                f"{manifest_path}: unsupported BM25 index format "
                f"{manifest.get('format')!r} v{manifest.get('format_version')!r}; "
                "re-run `parallel-rag ingest` to rebuild it"
            )
        if manifest.get("variant") != BM25_VARIANT:
            raise ValueError(f"{manifest_path}: unsupported BM25 variant {manifest['variant']!r}")
        stored_k1, stored_b = float(manifest["k1"]), float(manifest["b"])
        k1 = stored_k1 if k1 is None else k1
        b = stored_b if b is None else b
        _check_params(engine, k1, b)

        chunks = _read_chunks(directory / CHUNKS_FILE)
        with open(directory / VOCAB_FILE, encoding="utf-8") as f:
            vocabulary: list[str] = json.load(f)
        token_ids = np.load(directory / TOKEN_IDS_FILE, allow_pickle=False)
        token_offsets = np.load(directory / TOKEN_OFFSETS_FILE, allow_pickle=False)
        if (
            len(chunks) != manifest["num_chunks"]
            or len(vocabulary) != manifest["num_terms"]
            or token_offsets.shape != (len(chunks) + 1,)
            or int(token_offsets[-1]) != token_ids.size
        ):
            raise ValueError(f"{directory}: BM25 index files are inconsistent; re-run ingest")

        model = None
        model_dir = directory / BM25S_DIR
        if engine == "bm25s" and vocabulary and (k1, b) == (stored_k1, stored_b):
            if model_dir.is_dir():
                model = bm25s.BM25.load(model_dir, load_corpus=False, mmap=False)
                if (
                    model.scores["num_docs"] != len(chunks)
                    or len(model.scores["indptr"]) != len(vocabulary) + 1
                ):
                    raise ValueError(f"{model_dir}: bm25s model does not match the index")
            else:
                logger.warning("%s missing; rebuilding the bm25s model from term ids", model_dir)
        return cls(
            chunks=chunks,
            vocabulary=vocabulary,
            token_ids=token_ids,
            token_offsets=token_offsets,
            analyzer=manifest["analyzer"],
            engine=engine,
            k1=k1,
            b=b,
            bm25s_model=model,
        )


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


def write_terms(
    directory: Path,
    vocabulary: Sequence[str],
    token_ids: np.ndarray,
    offsets: np.ndarray,
    *,
    analyzer: AnalyzerName,
    k1: float,
    b: float,
    model: bm25s.BM25 | None = None,
) -> None:
    """Everything of an index but its chunks file, into ``directory``: the vocabulary, the term
    ids, the bm25s model (built from the term ids unless given) and, last, the manifest."""
    with open(directory / VOCAB_FILE, "w", encoding="utf-8") as f:
        json.dump(list(vocabulary), f, ensure_ascii=False)
    _write_token_ids(directory, token_ids, offsets)
    if vocabulary:
        if model is None:
            model = bm25s_model(token_ids, offsets, {t: i for i, t in enumerate(vocabulary)}, k1, b)
        model.save(directory / BM25S_DIR, show_progress=False)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "variant": BM25_VARIANT,
        "analyzer": analyzer,
        "k1": k1,
        "b": b,
        "title_weight": TITLE_WEIGHT,
        "num_chunks": int(offsets.size - 1),
        "num_terms": len(vocabulary),
        "num_tokens": int(token_ids.size),
        "bm25s_version": bm25s.__version__,
    }
    # Written last: a directory without a manifest is never taken for an index.
    with open(directory / MANIFEST_FILE, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)


def chunk_line(chunk: BM25Chunk) -> str:
    """A chunk as its line of ``chunks.jsonl`` (newline included)."""
    record = {"id": chunk.id, "content": chunk.content, "metadata": chunk.metadata}
    try:
        return json.dumps(record, ensure_ascii=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise TypeError(f"chunk {chunk.id!r}: metadata is not JSON-serialisable ({exc})") from exc


def _write_chunks(path: Path, chunks: Sequence[BM25Chunk]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(map(chunk_line, chunks))


def _read_chunks(path: Path) -> tuple[BM25Chunk, ...]:
    chunks: list[BM25Chunk] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                chunks.append(BM25Chunk(record["id"], record["content"], record["metadata"]))
    return tuple(chunks)


def _write_token_ids(directory: Path, token_ids: np.ndarray, offsets: np.ndarray) -> None:
    np.save(directory / TOKEN_IDS_FILE, np.asarray(token_ids, dtype=np.int32))
    np.save(directory / TOKEN_OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))


def _is_replaceable(target: Path) -> bool:
    """Only an earlier index (or an empty directory) may be replaced by :meth:`save`."""
    if not target.is_dir():
        return False
    return is_index_directory(target) or not any(target.iterdir())


def is_index_directory(path: Path) -> bool:
    """A directory holding a complete index (the manifest is written last)."""
    return (path / MANIFEST_FILE).is_file()


def recover_interrupted_save(path: str | os.PathLike[str]) -> bool:
    """Put back the previous index when a save was killed between its two renames (the index
    moved aside, the new one not yet in place); True if it did. Only writers call this."""
    return restore_moved_aside(path, is_index_directory)


IndexStamp = tuple[int, int, int, int, int]
"""What identifies one save of an index: its manifest's device, inode, size, mtime and ctime."""


def index_stamp(path: str | os.PathLike[str]) -> IndexStamp | None:
    """The stamp of the index saved at ``path`` (one ``stat`` of its manifest), or None when
    there is none. Each save writes a new manifest, last, in a new directory renamed into
    place, so every save has a stamp of its own."""
    try:
        stat = os.stat(Path(path) / MANIFEST_FILE)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _save_in_progress(path: Path) -> bool:
    """A save is between its two renames: the old index moved aside, the new one not in yet."""
    return any(path.parent.glob(f".{path.name}{ASIDE_MARK}*"))


# --------------------------------------------------------------------------------------
# Retriever
# --------------------------------------------------------------------------------------


class _LoadedIndex(NamedTuple):
    """An index and the stamp of the save it was read from."""

    index: BM25Index
    stamp: IndexStamp


_NO_STAMP: Any = object()
"""No save is being skipped (a stamp is a tuple or None, never this)."""
_LOAD_ATTEMPTS = 3
"""Loads tried when saves keep landing while the files are read."""


class BM25Retriever(SearchKwargsRetriever):
    """LangChain retriever over a saved :class:`BM25Index` (lexical branch).

    The index is loaded lazily on first use (once, thread-safe) and cached. With
    ``auto_reload`` (the default) every query first compares the saved index's stamp
    (:func:`index_stamp`, one ``stat``) with the loaded one's, so an ingest by this or any
    other process is answered from by the next query, without a restart or :meth:`reload`:

    * the query that notices a new save loads it and answers from it; queries that see the
      new save while it loads wait for that load and answer from it too, so no query that
      starts after a save is visible is answered from an older one (context cached above the
      retriever under the new save's fingerprint is never the old index's);
    * a load is kept only if the stamp did not change while the files were read, so a save
      swapped in halfway never gives a mix of two saves;
    * a save that cannot be loaded (corrupt, unreadable, the index deleted) leaves the loaded
      index serving, with one warning for that save; the next save, or :meth:`reload`, tries
      again. Only the first load raises (no index yet: the error says to run ingest).

    Context cached above the retriever must be dropped when the index changes, or a question
    asked again after an ingest would get the old chunks: the router's context cache keys its
    entries on a fingerprint of the index files, so an ingest empties it, and the query that
    refills it is answered from the new save.

    Per-call ``k`` and ``filters`` are accepted::

        retriever.invoke("query", k=5, filters={"source": "a.md"})
    """

    reads_revisions: ClassVar[bool] = True  # held for a graph run: revisions.py

    index_path: str = DEFAULT_INDEX_PATH
    engine: Engine = "bm25s"
    k: int = Field(default=10, ge=1)
    k1: float = Field(default=1.5, gt=0)
    b: float = Field(default=0.75, ge=0, le=1)
    auto_reload: bool = Field(
        default=True, description="Check for a newer save before each query and load it."
    )

    retrieval_kind: ClassVar[RetrievalKind] = "lexical"

    _loaded: _LoadedIndex | None = PrivateAttr(default=None)
    _load_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _skipped: Any = PrivateAttr(default=_NO_STAMP)  # a save that could not be loaded
    _attempted: Any = PrivateAttr(default=None)  # the stamp of the last load attempt

    @field_validator("index_path", mode="before")
    @classmethod
    def coerce_index_path(cls, value: Any) -> Any:
        """Accept ``pathlib.Path`` values as well as strings."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @classmethod
    def from_settings(cls, settings: BM25Settings, k: int) -> BM25Retriever:
        """A retriever for a validated ``backend_config`` (index_path already resolved)."""
        return cls(
            index_path=settings.index_path,
            engine=settings.engine,
            k=k,
            k1=settings.k1,
            b=settings.b,
            auto_reload=settings.auto_reload,
        )

    def term_index(self) -> BM25Index:
        """The index the ``prf`` rewriter expands queries from (``base.term_index_of``)."""
        return self.get_index()

    def get_index(self) -> BM25Index:
        """The loaded index: loads it on the first call and, with ``auto_reload``, loads a
        newer save when there is one (see the class docstring). Inside a graph run
        (``revisions.run_scope``), the index the run took when it started."""
        return held_for_run((id(self), "bm25"), self._current_index)

    def _current_index(self) -> BM25Index:
        loaded = self._loaded
        if loaded is None:
            with self._load_lock:
                loaded = self._loaded
                if loaded is None:
                    loaded = self._loaded = self._load()
        elif self.auto_reload:
            stamp = index_stamp(self.index_path)
            if stamp != loaded.stamp and stamp != self._skipped:
                loaded = self._refresh()
        return loaded.index

    def warm_up(self) -> None:
        """Load the index now (see ``SearchKwargsRetriever.warm_up``)."""
        self.get_index()

    def reload(self) -> None:
        """Forget the cached index; the next query loads it again from disk."""
        with self._load_lock:
            self._loaded = None
            self._skipped = _NO_STAMP

    def _load(self) -> _LoadedIndex:
        """Read the saved index with its stamp, again if a save landed while the files were
        read (the stamp differs after the read). Called with ``_load_lock`` held."""
        stamp = index_stamp(self.index_path)
        for attempt in range(_LOAD_ATTEMPTS):
            self._attempted = stamp
            last = attempt == _LOAD_ATTEMPTS - 1
            try:
                index = BM25Index.load(self.index_path, self.engine, k1=self.k1, b=self.b)
            except Exception:
                after = index_stamp(self.index_path)
                if after == stamp or last:
                    raise
                stamp = after  # a save landed mid-read: read that one
                continue
            after = index_stamp(self.index_path)
            if stamp is not None and after == stamp:
                return _LoadedIndex(index, stamp)
            stamp = after
        raise RuntimeError(
            f"{self.index_path}: the BM25 index was replaced {_LOAD_ATTEMPTS} times while "
            "being read; try again once the ingest has finished"
        )

    def _refresh(self) -> _LoadedIndex:
        """Load the newer save ``get_index`` saw, or wait for the query already loading it.
        Never raises once an index is loaded: a failed load keeps the loaded one."""
        with self._load_lock:
            current = self._loaded
            if current is None:  # reload() ran meanwhile: load as on first use
                current = self._loaded = self._load()
                return current
            stamp = index_stamp(self.index_path)
            if stamp == current.stamp or stamp == self._skipped:
                return current
            if stamp is None:
                self._skipped = None
                if not _save_in_progress(Path(self.index_path)):
                    logger.warning(
                        "%s: the BM25 index is gone; still answering from the one loaded before",
                        self.index_path,
                    )
                return current
            try:
                fresh = self._load()
            except Exception as error:
                self._skipped = self._attempted
                logger.warning(
                    "%s: could not load the new BM25 index (%s: %s); still answering from the "
                    "one loaded before",
                    self.index_path,
                    type(error).__name__,
                    error,
                )
                return current
            self._loaded, self._skipped = fresh, _NO_STAMP
            logger.info(
                "%s: loaded the new BM25 index (%d chunks)", self.index_path, len(fresh.index)
            )
            return fresh

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        hits = self.get_index().search(query, k=self.k if k is None else k, filters=filters)
        return [
            scored_document(hit.chunk.id, hit.chunk.content, hit.chunk.metadata, hit.score)
            for hit in hits
        ]


# --------------------------------------------------------------------------------------
# Registry entry
# --------------------------------------------------------------------------------------


def build_retriever(request: BuildRequest) -> BM25Retriever:
    settings: BM25Settings = request.settings
    resolved = settings.model_copy(
        update={"index_path": str(settings.index_dir(request.context.base_dir))}
    )
    return BM25Retriever.from_settings(resolved, k=request.k)


@dataclass
class BM25Store(SettingsStore):
    """Ingest's writer for a BM25 index: a write saves the index with the replaced files'
    chunks swapped for the new ones, atomically; both it and ``fingerprints`` read the saved
    files as streams and arrays, never loading the index (``bm25_updates``)."""

    needs_vectors: ClassVar[bool] = False

    @property
    def path(self) -> Path:
        return self.settings.index_dir(self.context.base_dir)

    def open(self) -> None:
        recover_interrupted_save(self.path)

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint] | None:
        from parallel_rag.backends.bm25 import updates as bm25_updates  # it builds on this module

        manifest = bm25_updates.stored_manifest(self.path)
        if manifest is None or (
            manifest["k1"],
            manifest["b"],
            manifest.get("title_weight", 1),
        ) != (self.settings.k1, self.settings.b, TITLE_WEIGHT):
            return None  # no index yet, or one scored or tokenised otherwise: rebuild it all
        return bm25_updates.stored_fingerprints(self.path, file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        from parallel_rag.backends.bm25 import updates as bm25_updates  # it builds on this module

        chunks = list(zip(batch.ids, batch.texts, batch.metadatas, strict=True))
        if bm25_updates.stored_manifest(self.path) is None:
            self._save(chunks)
            return
        s = self.settings
        bm25_updates.replace_files(self.path, replace_file_ids, chunks, k1=s.k1, b=s.b)

    def write_collection(self, batch: ChunkBatch) -> None:
        """An index of ``batch`` alone (a collection's chunks carry no file id to replace)."""
        self._save(list(zip(batch.ids, batch.texts, batch.metadatas, strict=True)))

    def _save(self, chunks: list[tuple[str, str, dict[str, Any]]]) -> None:
        s = self.settings
        BM25Index.from_chunks(chunks, engine=s.engine, k1=s.k1, b=s.b).save(self.path)
