"""What a Milvus outage and restart look like from a cached client, and pymilvus's own logging
kept out of the way of parallel-rag's.

A Milvus store is cached per process (``milvus.open_store``), so a serving replica keeps one
client for as long as it runs. When the server goes away and comes back, pymilvus's connection
manager reopens the client's channel by itself on the next call, but ``milvus-lite server``
starts every collection *released*, so each search is refused with code 101 ("collection ...
is in state 'released'; call load() before search/get/query") until someone loads it, and
nobody else will. ``call_loaded`` runs a call that needs a loaded collection, loads the
collection once when the call is refused that way, logs it once, and runs the call again.

While the server is down, pymilvus logs every failed call itself before raising it to the
caller: an ERROR with the whole traceback in its message (``pymilvus.decorators``), and a
WARNING with a traceback when its connection recovery fails
(``pymilvus.client.connection_manager``), through its own handler to stderr. parallel-rag
reports each failure where it catches it, in one line (the retriever's ``on_failure`` line),
so ``quiet_pymilvus`` drops those records; with the ``pymilvus`` logger set to DEBUG they pass
as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger("parallel_rag.backends.milvus.retriever")

COLLECTION_NOT_LOADED = 101
"""Milvus's ``CollectionNotLoaded`` status (Milvus Lite's ``LEGACY_COLLECTION_NOT_LOADED``)."""

_reload_locks: dict[tuple[str, str], threading.Lock] = {}
_registry_lock = threading.Lock()


def not_loaded(error: BaseException) -> bool:
    """Whether ``error`` is the server refusing a call on a collection that is not loaded."""
    from pymilvus.exceptions import MilvusException

    if not isinstance(error, MilvusException):
        return False
    if error.code == COLLECTION_NOT_LOADED:
        return True
    message = str(getattr(error, "message", "") or error).lower()
    return "call load()" in message or "not loaded" in message


def _reload_lock(where: str, collection: str) -> threading.Lock:
    with _registry_lock:
        return _reload_locks.setdefault((where, collection), threading.Lock())


def reload_collection(client: Any, collection: str, where: str) -> bool:
    """Load ``collection`` unless it is loaded already; True when this call loaded it.

    One caller at a time per collection: the requests refused together by a restarted server
    wait for the first one's load, find the collection loaded and log nothing, so a replica
    says it once."""
    from pymilvus.client.types import LoadState

    with _reload_lock(where, collection):
        if client.get_load_state(collection).get("state") == LoadState.Loaded:
            return False
        client.load_collection(collection)
    logger.warning(
        "milvus collection '%s' at %s reloaded after server restart (it came back released)",
        collection,
        where,
    )
    return True


def call_loaded(client: Any, collection: str, where: str, call: Callable[[], T]) -> T:
    """``call()``, which needs ``collection`` loaded; refused because it is not (a restarted
    server), the collection is loaded again and ``call()`` runs once more."""
    try:
        return call()
    except Exception as error:
        if not not_loaded(error):
            raise
    reload_collection(client, collection, where)
    return call()


class _PymilvusFailureNoise(logging.Filter):
    """Drops pymilvus's own reports of a failure it then raises to its caller: records at
    WARNING or above from ``pymilvus.decorators`` (the ``error_handler`` ERROR with a traceback
    in its text, the retry loop's "Retry timeout" warning), and records carrying a traceback
    from ``pymilvus.client.connection_manager`` ("Connection recovery failed"). Everything
    passes while the ``pymilvus`` logger is set to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if logging.getLogger("pymilvus").isEnabledFor(logging.DEBUG):
            return True
        if record.name == "pymilvus.decorators":
            return False
        return record.exc_info is None


_noise = _PymilvusFailureNoise()
NOISY_LOGGERS = ("pymilvus.decorators", "pymilvus.client.connection_manager")


def quiet_pymilvus() -> None:
    """Install the filter on the loggers that report failures pymilvus raises anyway (once;
    after pymilvus is imported, whose import configures its loggers)."""
    import pymilvus  # noqa: F401 - its import runs its logging.config.dictConfig first

    for name in NOISY_LOGGERS:
        log = logging.getLogger(name)
        if _noise not in log.filters:
            log.addFilter(_noise)
