"""Milvus retrieval through ``langchain-milvus``: a Milvus Lite file or a Milvus server, dense
(``search: dense``, the default) or lexical (``search: full_text``).

``uri`` is a local path (Milvus Lite; relative paths start at the config's directory) or a
server URL (``http://host:19530``), with ``token`` for auth. A dense collection uses the COSINE
metric, so scores are cosine similarities and ``similarity_threshold`` drops hits below it.

``search: full_text`` makes the branch lexical with BM25 inside the engine: the collection's
text field is an analyzed ``VARCHAR`` (``analyzer_params``, the engine's ``standard`` analyzer
when unset) and a ``Function(type=BM25)`` (``langchain_milvus.BM25BuiltInFunction``) fills a
``SPARSE_FLOAT_VECTOR`` field (``sparse_field``) indexed with the ``BM25`` metric
(``bm25_k1``/``bm25_b``, fixed when ingest creates the collection). Queries are sent as text;
the engine analyzes them with the same analyzer. Scores are BM25 scores (unbounded, so
``similarity_threshold`` is refused). It is a separate collection from a dense one: ingest
writes both like every store, so one Milvus deployment serves both branches.

Metadata lives either in top-level fields (``metadata_field`` unset: typed or dynamic fields,
what ``langchain-milvus`` writes by default) or in one JSON field (``metadata_field: NAME``).
Request filters become a Milvus boolean expression in that layout (``tenant == "acme"`` or
``metadata["tenant"] == "acme"``), AND-ed with the static ``filter_expression``, which is
validated at load time (both in ``milvus_expressions.py``).

Milvus Lite allows one process per file; stores are cached per process so every branch,
request and the ingester share one client, and calls on a local file are serialised. A second
process opening the same file gets ``StoreInUseError`` naming the file. A cached store outlives
a server restart: a collection the restarted server brings back released is loaded again on the
first call it refuses, and pymilvus's own tracebacks of failed calls stay out of the log
(``milvus_outages.py``).
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BuildRequest,
    ChunkBatch,
    DenseStoreRetriever,
    Fingerprint,
    MetadataFilter,
    RetrievalKind,
    SettingsStore,
    StoreInUseError,
    scored_document,
    settings_factory,
)
from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings
from parallel_rag.backends.milvus.expressions import (
    milvus_expression,
    milvus_field,
    milvus_literal,
)
from parallel_rag.backends.milvus.outages import call_loaded, quiet_pymilvus
from parallel_rag.backends.milvus.settings import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_K1,
    DEFAULT_SPARSE_FIELD,
    DEFAULT_URI,
    FULL_TEXT_ONLY,
    MilvusSettings,
    threshold_refusal,
)
from parallel_rag.backends.shared.secrets import register_secrets, secret_value
from pydantic import PrivateAttr

logger = logging.getLogger(__name__)

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "DEFAULT_BM25_B",
    "DEFAULT_BM25_K1",
    "DEFAULT_SPARSE_FIELD",
    "DEFAULT_URI",
    "FULL_TEXT_ONLY",
    "MilvusSettings",
    "threshold_refusal",
]

INDEX_PARAMS = {"metric_type": "COSINE", "index_type": "AUTOINDEX", "params": {}}
DELETE_BATCH = 64


class _LiteTimestampNoise(logging.Filter):
    """Milvus Lite's in-process gRPC server lacks ``AllocTimestamp``; pymilvus asks for it when
    creating a collection, copes with the refusal, and grpc logs a traceback. Drop only that."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], NotImplementedError):
            return "AllocTimestamp" not in "".join(traceback.format_tb(record.exc_info[2]))
        return True


_lite_filter = _LiteTimestampNoise()


class _LiteLockNoise(logging.Filter):
    """Milvus Lite logs a traceback when another process holds a file's lock; parallel-rag
    reports that itself (``StoreInUseError`` naming the file), so the traceback is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return type(error).__name__ != "DataDirLockedError"


_lite_lock_filter = _LiteLockNoise()


def lite_lock_held(uri: str) -> bool:
    """True when another process holds the lock of the Milvus Lite data at ``uri``."""
    import fcntl

    lock = Path(uri) / "LOCK"  # milvus_lite.db.LOCK_FILENAME
    if not lock.is_file():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


_stores: dict[tuple, Any] = {}
_locks: dict[str, threading.Lock] = {}
_registry_lock = threading.Lock()


def _lock_for(uri: str) -> threading.Lock:
    with _registry_lock:
        return _locks.setdefault(uri, threading.Lock())


def _search_arguments(settings: MilvusSettings, embedding_model: str, device: str) -> dict:
    """The ``langchain_milvus.Milvus`` arguments that differ between dense and full text."""
    if not settings.full_text:
        return {
            "embedding_function": load_embeddings(embedding_model, device),
            "index_params": dict(INDEX_PARAMS),
            "search_params": {"metric_type": "COSINE", "params": {}},
            "vector_field": settings.vector_field,
        }
    from langchain_milvus import BM25BuiltInFunction

    return {
        "embedding_function": None,
        "builtin_function": BM25BuiltInFunction(
            input_field_names=settings.content_field,
            output_field_names=settings.sparse,
            analyzer_params=settings.analyzer_params,
            function_name="parallel_rag_bm25",
        ),
        "index_params": settings.full_text_index_params(),
        "search_params": {"metric_type": "BM25", "params": {}},
        "vector_field": settings.sparse,
    }


def _stale_connection(error: Exception) -> bool:
    """Whether opening failed on pymilvus's shared connection to a server rather than on the
    server: a channel idle past pymilvus's health-check threshold that the server has sent
    away (a gRPC GOAWAY, e.g. ``too_many_pings`` from ``milvus-lite server``) fails its own
    recovery once with CONNECT_FAILED, and the next connection to the same URI opens a fresh
    channel. One more attempt is enough; a server that is really down fails it too."""
    from pymilvus.exceptions import MilvusException

    return isinstance(error, MilvusException) and error.code == 2  # Status.CONNECT_FAILED


def _check_existing_collection(settings: MilvusSettings, args: dict[str, Any]) -> None:
    """``check_collection`` before ``langchain_milvus`` opens the collection: it would try to
    index the field this search needs, and fail obscurely where that field does not exist."""
    from pymilvus import MilvusClient

    probe = MilvusClient(**args)
    try:
        if probe.has_collection(settings.collection):
            check_collection(settings, probe)
    finally:
        probe.close()


def open_store(
    settings: MilvusSettings, base_dir: Path | None, embedding_model: str, device: str
) -> Any:
    """The shared ``langchain_milvus.Milvus`` store of a collection (created lazily on write):
    embeddings for ``search: dense``, the BM25 function for ``search: full_text``."""
    args = settings.connection_args(base_dir)
    key = (
        args["uri"],
        secret_value(settings.token),
        settings.db_name,
        settings.collection,
        settings.metadata_field,
        None if settings.full_text else embedding_model,
    )
    with _registry_lock:
        store = _stores.get(key)
    if store is not None:
        return store
    from langchain_milvus import Milvus

    quiet_pymilvus()
    register_secrets([settings.token])
    if not settings.is_server:
        Path(args["uri"]).parent.mkdir(parents=True, exist_ok=True)
        grpc_log = logging.getLogger("grpc._server")
        if _lite_filter not in grpc_log.filters:
            grpc_log.addFilter(_lite_filter)
        lite_log = logging.getLogger("milvus_lite.server_manager")
        if _lite_lock_filter not in lite_log.filters:
            lite_log.addFilter(_lite_lock_filter)
    with _lock_for(args["uri"]):
        in_use = False
        for attempt in (1, 2):
            try:
                _check_existing_collection(settings, args)
                store = Milvus(
                    collection_name=settings.collection,
                    connection_args=args,
                    consistency_level=settings.consistency_level,
                    auto_id=False,
                    primary_field=settings.primary_field,
                    text_field=settings.content_field,
                    enable_dynamic_field=settings.metadata_field is None,
                    metadata_field=settings.metadata_field,
                    **_search_arguments(settings, embedding_model, device),
                )
                break
            except ValueError:  # check_collection's refusal, whoever holds the lock
                raise
            except Exception as error:
                if settings.is_server and attempt == 1 and _stale_connection(error):
                    logger.info("reconnecting to %s: %s", args["uri"], error)
                    continue
                if settings.is_server or not lite_lock_held(args["uri"]):
                    raise
                in_use = True
                break
        if in_use:  # raised outside the handler: pymilvus's "Open local milvus failed" says less
            raise StoreInUseError("Milvus Lite file", args["uri"], "Milvus")
    with _registry_lock:
        return _stores.setdefault(key, store)


def forget_stores(uri: str | None = None) -> None:
    """Drop cached stores (all, or those of one uri): in tests, before stopping a server."""
    with _registry_lock:
        for key in [k for k in _stores if uri is None or k[0] == uri]:
            store = _stores.pop(key)
            try:
                store.client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection is best effort
                pass


def check_collection(settings: MilvusSettings, client: Any) -> dict[str, Any]:
    """The description of an existing collection, refused (``ValueError`` naming what is
    wrong) when the entry's ``search`` cannot use it: a dense search needs the vector field
    with the COSINE metric, a full-text one a BM25 function writing the sparse field."""
    from pymilvus import FunctionType

    s = settings
    described = client.describe_collection(s.collection)
    if s.full_text:
        bm25 = [
            f
            for f in described.get("functions") or []
            if f.get("type") == FunctionType.BM25
            and s.sparse in (f.get("output_field_names") or [])
        ]
        if not bm25:
            raise ValueError(
                f"Milvus collection '{s.collection}' has no BM25 function writing "
                f"'{s.sparse}', so it cannot serve search: full_text (it was written for "
                "dense search): give this entry its own collection and run "
                "`parallel-rag ingest PATH...`"
            )
        return described
    if s.vector_field not in {f["name"] for f in described.get("fields", [])}:
        raise ValueError(
            f"Milvus collection '{s.collection}' has no vector field '{s.vector_field}' "
            "(a full-text collection? set search: full_text)"
        )
    for name in client.list_indexes(s.collection):
        info = client.describe_index(s.collection, name)
        metric = info.get("metric_type")
        if info.get("field_name") == s.vector_field and metric and metric.upper() != "COSINE":
            raise ValueError(
                f"Milvus collection '{s.collection}' uses metric {metric}; "
                "parallel-rag needs COSINE"
            )
    return described


class MilvusRetriever(DenseStoreRetriever):
    """Dense retriever over a Milvus collection; usable alone in any LangChain chain."""

    settings: MilvusSettings
    _output_fields: list[str] = PrivateAttr(default_factory=list)

    metric: ClassVar[str] = "COSINE"

    def _guard(self):
        """Calls on a Milvus Lite file are serialised; a server takes them concurrently."""
        if self.settings.is_server:
            return nullcontext()
        return _lock_for(self.settings.resolved_uri(self.base_dir))

    def warm_up(self) -> None:
        """Connect now (a Milvus Lite file starts its local server process) and check the
        collection (see ``SearchKwargsRetriever.warm_up``)."""
        self._store()

    def _where(self) -> str:
        """The server URL or the Milvus Lite file, as messages name it."""
        s = self.settings
        return s.uri if s.is_server else s.resolved_uri(self.base_dir)

    def _store(self) -> Any:
        s = self.settings
        store = open_store(s, self.base_dir, self.embedding_model, self.device)
        if not self._output_fields:
            with self._guard():
                if not store.client.has_collection(s.collection):
                    raise LookupError(
                        f"Milvus collection '{s.collection}' does not exist at {self._where()}; "
                        "run `parallel-rag ingest PATH...` first"
                    )
                described = check_collection(s, store.client)
            fields = [  # DataType is an IntEnum: its str() is a number, its name says VECTOR
                f["name"]
                for f in described.get("fields", [])
                if "VECTOR" not in getattr(f["type"], "name", str(f["type"]))
            ]
            if described.get("enable_dynamic_field"):
                fields.append("$meta")
            self._output_fields = fields
        return store

    def _anns_field(self) -> str:
        return self.settings.vector_field

    def _query_data(self, store: Any, query: str) -> Any:
        return store.embeddings.embed_query(query)

    def _score(self, distance: float) -> float:
        return distance

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        s = self.settings
        store = self._store()
        data = self._query_data(store, query)
        expression = milvus_expression(filters, s.metadata_field, s.filter_expression)
        with self._guard():
            results = call_loaded(
                store.client,
                s.collection,
                self._where(),
                lambda: store.client.search(
                    s.collection,
                    data=[data],
                    anns_field=self._anns_field(),
                    search_params={"metric_type": self.metric, "params": {}},
                    limit=k or self.k,
                    filter=expression or "",
                    output_fields=self._output_fields,
                ),
            )
        docs = []
        for hit in results[0] if results else []:
            score = self._score(float(hit["distance"]))
            if self.score_threshold is not None and score < self.score_threshold:
                continue
            docs.append(self._to_document({**hit, "distance": score}))
        return docs

    def _to_document(self, hit: dict[str, Any]) -> Document:
        s = self.settings
        entity = dict(hit.get("entity") or {})
        doc_id = hit.get(s.primary_field, hit.get("id", entity.get(s.primary_field)))
        content = entity.pop(s.content_field, None)
        if not isinstance(content, str):
            raise ValueError(f"Milvus hit {doc_id!r} has no text field '{s.content_field}'")
        if s.metadata_field:
            metadata = dict(entity.get(s.metadata_field) or {})
        else:
            for name in (s.primary_field, s.vector_field, "$meta"):
                entity.pop(name, None)
            metadata = entity
        return scored_document(str(doc_id), content, metadata, float(hit["distance"]))


class MilvusFullTextRetriever(MilvusRetriever):
    """Lexical retriever over a Milvus full-text collection (``search: full_text``): the query
    text goes to the engine, which analyzes it and scores BM25 over the sparse field."""

    retrieval_kind: ClassVar[RetrievalKind] = "lexical"
    metric: ClassVar[str] = "BM25"

    def _anns_field(self) -> str:
        return self.settings.sparse

    def query_embedding(self) -> tuple[str, str] | None:
        """None: the engine analyzes the query text, nothing is embedded."""
        return None

    def _query_data(self, store: Any, query: str) -> Any:
        return query

    def _score(self, distance: float) -> float:
        """The BM25 score: Milvus answers it as the distance, Milvus Lite as its negation
        (smaller is better there); a BM25 score is never negative, so both read the same."""
        return abs(distance)


def files_expressions(settings: MilvusSettings, file_ids: Sequence[str]) -> Iterator[str]:
    """Expressions selecting the entities of ``file_ids``, ``DELETE_BATCH`` files at a time."""
    field = milvus_field("file_id", settings.metadata_field)
    for start in range(0, len(file_ids), DELETE_BATCH):
        batch = file_ids[start : start + DELETE_BATCH]
        yield " or ".join(f"{field} == {milvus_literal(f)}" for f in batch)


def stored_fingerprints(
    settings: MilvusSettings,
    base_dir: Path | None,
    file_ids: Sequence[str],
    *,
    embedding_model: str = BUNDLED,
    device: str = "cpu",
) -> set[tuple[str, str, str | None]]:
    """(chunk id, file id, ``chunk_hash``) of every entity the files have in the collection:
    what ingest compares with fresh chunks to leave unchanged files alone."""
    store = open_store(settings, base_dir, embedding_model, device)
    uri = settings.resolved_uri(base_dir)
    found: set[tuple[str, str, str | None]] = set()
    with _lock_for(uri):
        client = store.client
        if not file_ids or not client.has_collection(settings.collection):
            return found
        wanted = [settings.metadata_field] if settings.metadata_field else ["file_id", "chunk_hash"]
        for expression in files_expressions(settings, file_ids):
            rows = call_loaded(
                client,
                settings.collection,
                settings.uri if settings.is_server else uri,
                lambda expression=expression: client.query(
                    settings.collection,
                    filter=expression,
                    output_fields=[settings.primary_field, *wanted],
                ),
            )
            for row in rows:
                metadata = (
                    (row.get(settings.metadata_field) or {}) if settings.metadata_field else row
                )
                found.add(
                    (
                        str(row[settings.primary_field]),
                        metadata.get("file_id"),
                        metadata.get("chunk_hash"),
                    )
                )
    return found


def write_chunks(
    settings: MilvusSettings,
    base_dir: Path | None,
    *,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]] | None,
    replace_file_ids: Sequence[str],
    embedding_model: str = BUNDLED,
    device: str = "cpu",
    batch_size: int = 256,
) -> None:
    """Replace every entity of ``replace_file_ids`` with the given chunks, then flush. A
    full-text collection takes no vectors: the engine's BM25 function analyzes the text."""
    store = open_store(settings, base_dir, embedding_model, device)
    uri = settings.resolved_uri(base_dir)
    with _lock_for(uri):
        client = store.client
        if client.has_collection(settings.collection) and replace_file_ids:
            for expression in files_expressions(settings, replace_file_ids):
                client.delete(settings.collection, filter=expression)
        for start in range(0, len(ids), batch_size):
            end = min(start + batch_size, len(ids))
            store.add_embeddings(
                texts=list(texts[start:end]),
                embeddings=[]
                if vectors is None
                else [[float(x) for x in v] for v in vectors[start:end]],
                metadatas=[dict(m) for m in metadatas[start:end]],
                ids=list(ids[start:end]),
            )
        if client.has_collection(settings.collection):
            client.flush(settings.collection)


class MilvusStore(SettingsStore):
    """Ingest's writer for a Milvus collection."""

    @property
    def needs_vectors(self) -> bool:  # type: ignore[override]
        return not self.settings.full_text

    def open(self) -> None:
        c = self.context
        open_store(self.settings, c.base_dir, c.embedding_model, c.device)

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint]:
        c = self.context
        return stored_fingerprints(
            self.settings, c.base_dir, file_ids, embedding_model=c.embedding_model, device=c.device
        )

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        c = self.context
        write_chunks(
            self.settings,
            c.base_dir,
            **batch.columns(),
            replace_file_ids=replace_file_ids,
            embedding_model=c.embedding_model,
            device=c.device,
        )


_dense_factory = settings_factory(MilvusRetriever)
_full_text_factory = settings_factory(MilvusFullTextRetriever)


def build_milvus_retriever(request: BuildRequest) -> MilvusRetriever:
    """The dense or the full-text retriever, as ``search`` says."""
    full_text = request.settings.full_text
    return (_full_text_factory if full_text else _dense_factory)(request)
