"""The ``langchain_milvus.Milvus`` store of a collection, shared by every branch, request and
the ingester of the process (``open_store``, cached per URI, database, collection, layout and
model), with the lock that serialises calls on a Milvus Lite file (``lock_for``): Milvus Lite
allows one process per file, so a second process opening it gets ``StoreInUseError`` naming the
file. An existing collection is checked against the entry's ``search`` first
(``check_collection``).
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from pathlib import Path
from typing import Any

from parallel_rag.backends.base import StoreInUseError
from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.backends.milvus.outages import quiet_pymilvus
from parallel_rag.backends.milvus.settings import MilvusSettings
from parallel_rag.backends.shared.secrets import register_secrets, secret_value

logger = logging.getLogger(__name__)

INDEX_PARAMS = {"metric_type": "COSINE", "index_type": "AUTOINDEX", "params": {}}


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


def lock_for(uri: str) -> threading.Lock:
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
    with lock_for(args["uri"]):
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
