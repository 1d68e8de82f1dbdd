"""The router's context cache: per route, retrieved context keyed on everything that changes
it (route, what was retrieved on: the conversation's resolved question and the question as
written, normalised; filters, tenant, top_k, thresholds, embedding identity, scorer
identity), kept in an LRU with a TTL and emptied when an ingest rewrites the route's stores
(a fingerprint of their files, ``store_generation``).

Two backends with one interface (``lookup``, ``put``, ``stats``, ``unavailable``):
``ContextCache`` in this process, and ``RedisContextCache``, shared by every replica on one
Redis, where an ingest anywhere bumps a counter that every replica's key includes. The
retrieval calls both off the event loop."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parallel_rag.backends.encoders.embeddings import BUNDLED, embedding_identity
from parallel_rag.backends.shared.secrets import register_secrets
from parallel_rag.graph.configuration import PipelineConfig


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    invalidations: int = 0


class ContextCache:
    """One route's retrieved context: an LRU of ``max_entries`` entries living ``ttl`` seconds,
    emptied when the route's stores change (``generation``, a fingerprint of their files)."""

    unavailable: str | None = None
    """Why the cache is not being used right now (never, in this process)."""

    def __init__(self, max_entries: int, ttl: float, clock=time.monotonic):
        self.max_entries, self.ttl, self.clock = max_entries, ttl, clock
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple, tuple[float, Any]] = OrderedDict()
        self._generation: tuple | None = None
        self._lock = threading.Lock()

    def _check_generation(self, generation: tuple) -> None:
        if generation != self._generation:
            if self._generation is not None:
                self.stats.invalidations += 1
            self._entries.clear()
            self._generation = generation

    def get(self, key: tuple, generation: tuple) -> Any | None:
        with self._lock:
            self._check_generation(generation)
            item = self._entries.get(key)
            if item is None or self.clock() - item[0] > self.ttl:
                if item is not None:
                    del self._entries[key]
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return item[1]

    def lookup(self, key: tuple, locations: list[Path]) -> tuple[Any | None, tuple]:
        """(the cached context or None, the generation a fresh one is stored under)."""
        generation = store_generation(locations)
        return self.get(key, generation), generation

    def put(self, key: tuple, generation: tuple, value: Any) -> None:
        with self._lock:
            self._check_generation(generation)
            self._entries[key] = (self.clock(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def normalised_query(query: str) -> str:
    return " ".join(query.casefold().split())


def embedding_name(pipeline: PipelineConfig) -> str:
    return embedding_identity(pipeline.embeddings.model or BUNDLED)


def scorer_name(pipeline: PipelineConfig) -> str | None:
    """The reranker's identity (kind, model, exit, budget), or None without one."""
    reranker = pipeline.reranker
    if reranker is None:
        return None
    model = reranker.model or (reranker.llm.model if reranker.llm else "")
    return (
        f"{reranker.kind}:{model}:layer={reranker.layer}:dim={reranker.dimension}:"
        f"max_tokens={reranker.max_tokens}:top_k={reranker.top_k}:"
        f"max_candidates={reranker.max_candidates}"
    )


def cache_key(
    route: str,
    pipeline: PipelineConfig,
    resolution: Mapping[str, Any],
    rag_request: dict[str, Any],
) -> tuple:
    """What the context of ``rag_request`` on ``route`` depends on. ``resolution`` is the
    conversation's ``ResolutionRecord``: the branches search its ``retrieved_on`` and, when
    that differs, the ``question`` as written too (a view of its own), so both are in the key.
    A follow-up ("Who designed it?") is therefore cached per subject it resolved to, never
    shared between conversations about different things, while a repeat of the same
    conversation (or the same first question) finds its entry."""
    thresholds = tuple((entry.name, entry.similarity_threshold) for entry in pipeline.retrievers)
    return (
        route,
        normalised_query(resolution["retrieved_on"]),
        normalised_query(resolution["question"]),
        json.dumps(rag_request.get("filters") or {}, sort_keys=True),
        rag_request.get("tenant"),
        rag_request["top_k"],
        thresholds,
        embedding_name(pipeline),
        scorer_name(pipeline),
    )


def store_generation(locations: list[Path]) -> tuple:
    """A fingerprint that changes when an ingest rewrites any of ``locations``: the
    (path, size, mtime) of each file (a folder: of the files in it, recursively)."""
    marks: list[tuple[str, int, int]] = []
    for location in locations:
        try:
            if location.is_dir():
                for item in sorted(location.rglob("*")):
                    if item.is_file() and not item.name.endswith((".lock", ".tmp")):
                        stat = item.stat()
                        marks.append((str(item), stat.st_size, stat.st_mtime_ns))
            elif location.exists():
                stat = location.stat()
                marks.append((str(location), stat.st_size, stat.st_mtime_ns))
            else:
                marks.append((str(location), -1, 0))
        except OSError:
            marks.append((str(location), -2, 0))
    return tuple(marks)


# -- the shared (Redis) context cache ---------------------------------------------------------

GENERATION_KEY = "generation"
"""Under the namespace: the counter every ingest through the config increments."""

REMOTE_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError)
"""Besides ``redis.RedisError``: what a dead or slow Redis raises."""

# Lua, run atomically by Redis with Redis's own clock (replicas' clocks may differ), in
# microseconds. _PUT: store an entry, index it in its route's LRU set, drop from the set what
# has outlived the TTL, then the least recently used beyond the bound. _TOUCH: a hit makes an
# entry the most recently used (only if it is still indexed).
_NOW = "local t = redis.call('TIME') local now = t[1] * 1000000 + t[2]\n"
_PUT_SCRIPT = (
    _NOW
    + """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]) * 1000)
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], excess)
  for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return excess
"""
)
_TOUCH_SCRIPT = _NOW + "return redis.call('ZADD', KEYS[1], 'XX', now, KEYS[2])\n"


def redis_client(url: str, timeout: float) -> Any:
    """A client that fails fast: one attempt per command, ``timeout`` seconds to connect and
    to answer (a slow Redis is treated as a down one); the pool reconnects by itself."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


def redis_address(url: str) -> str:
    """``host:port`` of a Redis URL, for messages (never its password)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class RedisContextCache:
    """One route's retrieved context in Redis, shared by every replica using the same Redis
    and ``namespace``: the same key as ``ContextCache`` (hashed, so no query, filter or tenant
    text appears in Redis's key space), a TTL on every entry, at most ``max_entries`` per
    route (the least recently used go first), and a cluster-wide generation counter in the
    key, which ``bump_shared_generation`` (run by every ingest through the config) increments,
    so an ingest on any machine empties every replica's cache at once.

    Redis down or slow (no answer within ``timeout``) never fails a request: the lookup is a
    miss, ``unavailable`` says why, and Redis is left alone for ``retry_seconds`` before the
    next attempt (which reconnects)."""

    def __init__(
        self,
        route: str,
        url: str,
        *,
        max_entries: int,
        ttl: float,
        namespace: str = "parallel-rag",
        timeout: float = 0.1,
        retry_seconds: float = 1.0,
        clock=time.monotonic,
    ):
        self.route, self.max_entries, self.ttl = route, max_entries, ttl
        self.namespace, self.retry_seconds, self.clock = namespace, retry_seconds, clock
        self.address = redis_address(url)
        self.stats = CacheStats()
        self.unavailable: str | None = None
        self._client = redis_client(url, timeout)
        self._put = self._client.register_script(_PUT_SCRIPT)
        self._touch = self._client.register_script(_TOUCH_SCRIPT)
        self._lru = f"{namespace}:lru:{digest(route)}"
        self._counter: int | None = None
        self._skip_until = 0.0
        self._lock = threading.Lock()

    def _call(self, action):
        """``action(client)``, or None when Redis is down, slow or being left alone."""
        import redis

        if self.clock() < self._skip_until:
            return None
        try:
            result = action(self._client)
        except (redis.RedisError, *REMOTE_ERRORS) as error:
            with self._lock:
                self._skip_until = self.clock() + self.retry_seconds
                self.unavailable = (
                    f"context cache unavailable (Redis at {self.address}: "
                    f"{type(error).__name__}); served without the cache"
                )
            return None
        with self._lock:
            self.unavailable = None
        return result

    def lookup(self, key: tuple, locations: list[Path]) -> tuple[Any | None, tuple]:
        """(the cached context or None, the generation to store a fresh one under)."""
        local = store_generation(locations)
        counter = self._call(lambda client: int(client.get(self._generation_key) or 0))
        if counter is None:
            with self._lock:
                self.stats.misses += 1
            return None, (local, None)
        generation = (local, counter)
        with self._lock:
            if self._counter is not None and counter != self._counter:
                self.stats.invalidations += 1
            self._counter = counter
        entry = self._entry(key, generation)
        raw = self._call(lambda client: client.get(entry))
        if raw is None:
            with self._lock:
                self.stats.misses += 1
            return None, generation
        self._call(lambda client: self._touch(keys=[self._lru, entry], client=client))
        with self._lock:
            self.stats.hits += 1
        return json.loads(raw), generation

    def put(self, key: tuple, generation: tuple, value: Any) -> None:
        if generation[1] is None:  # looked up while Redis was down: nothing to share
            return
        entry = self._entry(key, generation)
        payload = json.dumps(value, default=str)
        ttl_ms = max(1, int(self.ttl * 1000))
        self._call(
            lambda client: self._put(
                keys=[entry, self._lru],
                args=[payload, ttl_ms, self.max_entries],
                client=client,
            )
        )

    @property
    def _generation_key(self) -> str:
        return f"{self.namespace}:{GENERATION_KEY}"

    def _entry(self, key: tuple, generation: tuple) -> str:
        return f"{self.namespace}:ctx:{digest([key, generation])}"

    def __len__(self) -> int:
        return int(self._call(lambda client: client.zcard(self._lru)) or 0)

    def close(self) -> None:
        self._client.close()


def bump_shared_generation(url: str, namespace: str, timeout: float = 1.0) -> int:
    """Increment the cluster-wide generation (after an ingest): every replica's next lookup
    misses and retrieves from the rewritten stores. Raises what Redis raises."""
    client = redis_client(url, timeout)
    try:
        return int(client.incr(f"{namespace}:{GENERATION_KEY}"))
    finally:
        client.close()


def context_cache(
    route: str, settings: Any, ttl: float | None = None
) -> ContextCache | RedisContextCache:
    """The cache ``routing.context_cache`` (``ContextCacheConfig``) asks for, for one route
    (``ttl``: the route's own ``cache_ttl_seconds``, else the setting's)."""
    ttl = ttl or settings.ttl_seconds
    if settings.backend != "redis":
        return ContextCache(settings.max_entries, ttl)
    url = settings.redis_url()
    register_secrets([url, urllib.parse.urlsplit(url).password])
    return RedisContextCache(
        route,
        url,
        max_entries=settings.max_entries,
        ttl=ttl,
        namespace=settings.namespace,
        timeout=settings.timeout_seconds,
        retry_seconds=settings.retry_seconds,
    )


def invalidate_everywhere(settings: Any) -> str | None:
    """After an ingest: bump the shared generation when the context cache lives in Redis, so
    every replica's next lookup misses. None when done (or nothing is shared); otherwise the
    warning to print (Redis down: replicas serve what they cached until ``ttl_seconds``)."""
    if not settings.enabled or settings.backend != "redis":
        return None
    url = settings.redis_url()
    try:
        bump_shared_generation(url, settings.namespace)
    except Exception as error:  # noqa: BLE001 - the ingest itself succeeded
        return (
            f"warning: the shared context cache at {redis_address(url)} was not invalidated "
            f"({type(error).__name__}); replicas may serve cached context for up to "
            f"{settings.ttl_seconds:g}s"
        )
    return None
