"""BM25 lexical backend: the LangChain retriever over a saved index (``index.py``) and
ingest's store writer for it. The index's scoring, selection, files and updates live beside
it: ``scoring.py``, ``top_k.py``, ``storage.py``, ``updates.py``; the analyzers in
``analysis.py``.

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

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BuildRequest,
    ChunkBatch,
    Fingerprint,
    MetadataFilter,
    RetrievalKind,
    SearchKwargsRetriever,
    SettingsStore,
    scored_document,
)
from parallel_rag.backends.bm25 import updates as bm25_updates
from parallel_rag.backends.bm25.chunks import TITLE_WEIGHT
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.settings import DEFAULT_INDEX_PATH, ENGINES, BM25Settings, Engine
from parallel_rag.backends.bm25.storage import (
    IndexStamp,
    index_stamp,
    recover_interrupted_save,
    save_in_progress,
)
from parallel_rag.backends.shared.revisions import held_for_run
from pydantic import Field, PrivateAttr, field_validator

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_INDEX_PATH", "ENGINES", "BM25Settings", "Engine"]  # from settings.py


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
                if not save_in_progress(Path(self.index_path)):
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
    files as streams and arrays, never loading the index (``updates.py``)."""

    needs_vectors: ClassVar[bool] = False

    @property
    def path(self) -> Path:
        return self.settings.index_dir(self.context.base_dir)

    def open(self) -> None:
        recover_interrupted_save(self.path)

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint] | None:
        manifest = bm25_updates.stored_manifest(self.path)
        if manifest is None or (
            manifest["k1"],
            manifest["b"],
            manifest.get("title_weight", 1),
        ) != (self.settings.k1, self.settings.b, TITLE_WEIGHT):
            return None  # no index yet, or one scored or tokenised otherwise: rebuild it all
        return bm25_updates.stored_fingerprints(self.path, file_ids)

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
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
