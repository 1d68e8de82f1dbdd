"""Sentence vectors computed once, at ingest (its embed stage), and kept on disk beside the
indexes, so the extractive generator scores evidence it has never seen in its process without
running the embedding model over every sentence of every request. They live with the generator
because they are its sentences (``sentences.split_sentences``); a store that indexes sentences
too (Qdrant Edge's sentence shard) is handed them by ingest (``GeneratorSentences``), so no
backend owns the generator's text analysis.

Layout: one SQLite file (default ``.parallel-rag/sentence_vectors.sqlite3``) in WAL mode, one
table ``sentence_vectors(key BLOB PRIMARY KEY, vector BLOB) WITHOUT ROWID``. ``key`` is the
first 16 bytes of the SHA-256 of the embedding model's identity, a NUL and the sentence text;
``vector`` is the float32 vector's little-endian bytes. Several models can share one file.

Rows are keyed by text, not by chunk: a row is read only when the same text comes back under the
same model, and then its vector is the right one, so rows left behind by a replaced or deleted
chunk are harmless (they cost disk space, never a wrong answer) and nothing has to be kept in
step with deletes.

A write is one transaction (a reader sees all of a batch or none of it; a writer killed
mid-write leaves the store as it was) and never blocks readers (WAL). A store that cannot be
read (missing, corrupt, locked, another dimension) reads as empty: ``StoredSentenceEmbeddings``
then embeds with the model, exactly as without a store.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings
from parallel_rag.backends.encoders.embeddings import (
    WrappedEmbeddings,
    embedding_identity,
    load_embeddings,
)
from parallel_rag.nodes.generate.sentences import split_sentences

if TYPE_CHECKING:  # numpy loads with the first vectors read or written, not with the graph
    import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_PATH = ".parallel-rag/sentence_vectors.sqlite3"
KEY_BYTES = 16
LOOKUP_BATCH = 500  # keys per SELECT (below SQLite's bound-parameter limit)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS sentence_vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) "
    "WITHOUT ROWID"
)


def sentence_key(identity: str, text: str) -> bytes:
    """The row key of ``text`` embedded by the model named ``identity``."""
    digest = hashlib.sha256(identity.encode("utf-8") + b"\0" + text.encode("utf-8"))
    return digest.digest()[:KEY_BYTES]


class SentenceVectorStore:
    """Float32 vectors of sentences under one model identity, in a SQLite file.

    Reads share one read-only connection (reopened when the file is replaced); each ``put`` is
    one transaction on its own connection, so a long ingest never blocks a serving process."""

    def __init__(self, path: str | os.PathLike, identity: str):
        self.path = Path(path)
        self.identity = identity
        self._lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._reader_file: tuple[int, int] | None = None
        self._warned = False

    # -- reading -------------------------------------------------------------------------

    def _file_id(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def _connection(self) -> sqlite3.Connection | None:
        """The read connection, opened (again) when the file appeared or was replaced; None
        when there is no file. Called with ``_lock`` held."""
        file_id = self._file_id()
        if file_id is None:
            self._close_reader()
            return None
        if self._reader is None or file_id != self._reader_file:
            self._close_reader()
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._reader = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=5)
            self._reader_file = file_id
        return self._reader

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader = None
        self._reader_file = None

    def _unreadable(self, error: Exception) -> None:
        if not self._warned:
            logger.warning(
                "sentence vectors in %s not readable, embedding instead: %s", self.path, error
            )
            self._warned = True

    def get(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of those ``texts`` that have one (float32 rows, all of one
        dimension); an unreadable store gives none."""
        import numpy as np

        wanted = {sentence_key(self.identity, t): t for t in dict.fromkeys(texts)}
        if not wanted:
            return {}
        keys = list(wanted)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            try:
                connection = self._connection()
                if connection is None:
                    return {}
                for start in range(0, len(keys), LOOKUP_BATCH):
                    batch = keys[start : start + LOOKUP_BATCH]
                    marks = ",".join("?" * len(batch))
                    rows = connection.execute(
                        f"SELECT key, vector FROM sentence_vectors WHERE key IN ({marks})", batch
                    ).fetchall()
                    for key, blob in rows:
                        found[wanted[key]] = np.frombuffer(blob, dtype="<f4")
            except sqlite3.Error as error:
                self._close_reader()  # opened again on the next call
                self._unreadable(error)
                return {}
        sizes = {v.size for v in found.values()}
        if len(sizes) > 1:  # rows written by another model under the same name
            self._unreadable(ValueError(f"vectors of several dimensions {sorted(sizes)}"))
            return {}
        return found

    def missing(self, texts: Sequence[str]) -> list[str]:
        """Those ``texts`` (each once, in order) with no stored vector."""
        found = self.get(texts)
        return [t for t in dict.fromkeys(texts) if t not in found]

    def __len__(self) -> int:
        """Rows in the file (every model's); 0 when it cannot be read."""
        with self._lock:
            try:
                connection = self._connection()
                if connection is None:
                    return 0
                return connection.execute("SELECT count(*) FROM sentence_vectors").fetchone()[0]
            except sqlite3.Error as error:
                self._close_reader()
                self._unreadable(error)
                return 0

    def close(self) -> None:
        with self._lock:
            self._close_reader()

    # -- writing -------------------------------------------------------------------------

    def _open_writer(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=60)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_SCHEMA)
        except sqlite3.Error:
            connection.close()
            raise
        return connection

    def _discard_corrupt_file(self, error: Exception) -> None:
        """A file that is not a usable store is derived data only: set aside, started again."""
        logger.warning(
            "sentence vectors in %s unusable (%s); starting a new store", self.path, error
        )
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.path.replace(self.path.with_name(self.path.name + ".corrupt"))

    def put(self, texts: Sequence[str], vectors: Sequence[Sequence[float]] | np.ndarray) -> int:
        """Store the vectors of ``texts`` in one transaction; returns the rows written."""
        import numpy as np

        matrix = np.asarray(vectors, dtype="<f4")
        if len(texts) != len(matrix):
            raise ValueError(f"{len(texts)} texts but {len(matrix)} vectors")
        if not len(texts):
            return 0
        rows = [
            (sentence_key(self.identity, text), matrix[i].tobytes()) for i, text in enumerate(texts)
        ]
        try:
            connection = self._open_writer()
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) or not self.path.exists():
                raise  # locked, unwritable: not a damaged file
            self._discard_corrupt_file(error)
            connection = self._open_writer()
        try:
            with connection:  # one transaction: all rows or none
                connection.executemany(
                    "INSERT OR REPLACE INTO sentence_vectors (key, vector) VALUES (?, ?)", rows
                )
        finally:
            connection.close()
        return len(rows)


class StoredSentenceEmbeddings(WrappedEmbeddings):
    """An embedding model whose ``embed_documents`` returns stored vectors and embeds only the
    texts the store lacks (in one call to the wrapped model, each text once); ``embed_query``
    is the wrapped model's (the shared one embeds each query once). Rows come back as float32
    numpy arrays (sequences of floats), so no per-float conversion is paid. Other attributes
    are the wrapped model's."""

    def __init__(self, inner: Embeddings, store: SentenceVectorStore):
        super().__init__(inner)
        self.store = store

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        found = self.store.get(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fresh = np.asarray(self.inner.embed_documents(missing), dtype=np.float32)
            if found and fresh.shape[-1] != next(iter(found.values())).size:
                # stored under this model's name by another model: the model's vectors only
                return list(np.asarray(self.inner.embed_documents(list(texts)), np.float32))
            found.update(zip(missing, fresh, strict=True))
        return [found[t] for t in texts]  # type: ignore[misc]


@lru_cache(maxsize=8)
def _stored(path: str, model: str, device: str) -> StoredSentenceEmbeddings:
    store = SentenceVectorStore(path, embedding_identity(model))
    return StoredSentenceEmbeddings(load_embeddings(model, device), store)


def load_stored_sentence_embeddings(
    path: str | os.PathLike, model: str, device: str = "cpu"
) -> StoredSentenceEmbeddings:
    """The shared embedding model (``load_embeddings``) reading sentence vectors stored at
    ``path``: one store connection per file and model in a process."""
    return _stored(str(Path(path).resolve()), model, device)


@dataclass(frozen=True)
class GeneratorSentences:
    """The generator's sentences as a store that indexes sentences receives them from ingest
    (``backends.base.SentenceSource``): cut by ``split_sentences`` and embedded by the shared
    model, reading the vectors stored at ``stored`` first (ingest's embed stage has just
    written them), so each sentence is embedded once for the generator and the store."""

    model: str
    device: str = "cpu"
    stored: Path | None = None

    def split(self, text: str) -> list[str]:
        return split_sentences(text)

    def embeddings(self) -> Embeddings:
        if self.stored is None:
            return load_embeddings(self.model, self.device)
        return load_stored_sentence_embeddings(self.stored, self.model, self.device)
