"""``BM25Index``: an immutable BM25 index over chunks, scored by one of the two engines
(``scoring.py``), searched with the selection of ``top_k.py``, saved and loaded in the
format of ``storage.py``.

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

Loading never re-tokenises the corpus: engine ``bm25s`` loads the saved model (or rebuilds it
from the stored term ids when ``k1``/``b`` differ from the stored ones), engine ``rank_bm25``
rebuilds rank-bm25's statistics from the stored term ids. Saving goes through
``atomic_files.write_directory`` (a staging sibling renamed into place), so an interrupted save
never leaves a half-written index.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from parallel_rag.backends.base import MetadataFilter, matches_filter
from parallel_rag.backends.bm25.analysis import (
    ANALYZER_NAMES,
    DEFAULT_ANALYZER,
    AnalyzerName,
    get_analyzer,
)
from parallel_rag.backends.bm25.chunks import BM25Chunk, BM25Hit, normalise_chunks, tokenise
from parallel_rag.backends.bm25.scoring import (
    BM25_VARIANT,
    LuceneBM25Okapi,
    bm25s_model,
    check_params,
)
from parallel_rag.backends.bm25.settings import Engine
from parallel_rag.backends.bm25.storage import (
    BM25S_DIR,
    CHUNKS_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_FILE,
    TOKEN_IDS_FILE,
    TOKEN_OFFSETS_FILE,
    VOCAB_FILE,
    is_replaceable,
    missing_index_message,
    read_chunks,
    write_chunks,
    write_terms,
)
from parallel_rag.backends.bm25.top_k import select_top_k
from parallel_rag.backends.shared.atomic_files import write_directory

logger = logging.getLogger(__name__)

_FILTER_CACHE_SIZE = 64


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
        check_params(engine, k1, b)
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
        check_params(engine, k1, b)
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
        if target.exists() and not is_replaceable(target):
            raise FileExistsError(
                f"{target} exists and is not a BM25 index directory; refusing to replace it"
            )
        write_directory(target, self._write)

    def _write(self, directory: Path) -> None:
        write_chunks(directory / CHUNKS_FILE, self._chunks)
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
        check_params(engine, k1, b)

        chunks = read_chunks(directory / CHUNKS_FILE)
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
