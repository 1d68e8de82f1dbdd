"""The router's shared context cache on a real ``redis-server`` (127.0.0.1, a free port,
stopped by its PID): two caches on one Redis stand for two replicas; then two real ``serve``
replicas with both branches on a ``milvus-lite server`` (full text and dense), an ingest through
the CLI, Redis killed and restarted mid-run."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import httpx
import pytest
import yaml
from app_servers import running_serve
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.studio.router.cache import RedisContextCache, bump_shared_generation
from redis_server import RedisServer
from scripted_server import CHAT_COMPLETION, ScriptedServer, answer
from servers import BIN, free_port

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"


def replica(url: str, **settings) -> RedisContextCache:
    options = {"max_entries": 16, "ttl": 60.0, "namespace": "test", "timeout": 0.2}
    return RedisContextCache("docs", url, **{**options, **settings})


KEY = ("docs", "who was ada lovelace?", "{}", None, 3, (), "minilm", None)
VALUE = {"documents": [{"id": "a", "content": "Ada"}], "branches": [], "warnings": []}


def test_a_miss_on_one_replica_is_a_hit_on_another(redis_server):
    first, second = replica(redis_server.url), replica(redis_server.url)
    cached, generation = first.lookup(KEY, [])
    assert cached is None and first.stats.misses == 1
    first.put(KEY, generation, VALUE)
    cached, _ = second.lookup(KEY, [])
    assert cached == VALUE and second.stats.hits == 1
    assert first.unavailable is None and second.unavailable is None


def test_tenants_filters_and_settings_are_apart_and_no_text_is_in_a_key(redis_server):
    import redis

    cache = replica(redis_server.url)
    _, generation = cache.lookup(KEY, [])
    cache.put(KEY, generation, VALUE)
    for other in (
        KEY[:3] + ("acme",) + KEY[4:],  # another tenant
        KEY[:2] + ('{"lang": "en"}',) + KEY[3:],  # other filters
        KEY[:4] + (5,) + KEY[5:],  # another top_k
        KEY[:6] + ("another-embedding",) + KEY[7:],
    ):
        assert cache.lookup(other, [])[0] is None
    keys = [k.decode() for k in redis.Redis.from_url(redis_server.url).keys("*")]
    assert keys and not any("ada" in k or "docs" in k for k in keys)


def test_an_ingest_anywhere_empties_every_replica(redis_server):
    first, second = replica(redis_server.url), replica(redis_server.url)
    _, generation = first.lookup(KEY, [])
    first.put(KEY, generation, VALUE)
    assert second.lookup(KEY, [])[0] == VALUE
    assert bump_shared_generation(redis_server.url, "test") == 1
    assert second.lookup(KEY, [])[0] is None and second.stats.invalidations == 1
    assert first.lookup(KEY, [])[0] is None
    assert replica(redis_server.url, namespace="other").lookup(KEY, [])[1][1] == 0


def test_entries_expire_and_the_size_bound_drops_the_least_recently_used(redis_server):
    cache = replica(redis_server.url, max_entries=3)
    keys = [KEY[:1] + (f"question {i}",) + KEY[2:] for i in range(5)]
    for key in keys[:3]:
        cache.put(key, cache.lookup(key, [])[1], VALUE)
    assert cache.lookup(keys[0], [])[0] == VALUE  # now the most recently used
    for key in keys[3:]:
        cache.put(key, cache.lookup(key, [])[1], VALUE)
    assert len(cache) == 3
    assert [cache.lookup(key, [])[0] is not None for key in keys] == [
        True,
        False,
        False,
        True,
        True,
    ]
    short = replica(redis_server.url, ttl=0.3, namespace="short")
    short.put(KEY, short.lookup(KEY, [])[1], VALUE)
    assert short.lookup(KEY, [])[0] == VALUE
    time.sleep(0.5)
    assert short.lookup(KEY, [])[0] is None


def test_redis_down_is_a_miss_with_a_reason_then_hits_again_after_a_restart(redis_server):
    cache = replica(redis_server.url, retry_seconds=0.5)
    cache.put(KEY, cache.lookup(KEY, [])[1], VALUE)
    redis_server.stop()
    started = time.monotonic()
    cached, generation = cache.lookup(KEY, [])
    assert cached is None and time.monotonic() - started < 2
    assert "context cache unavailable (Redis at 127.0.0.1:" in cache.unavailable
    assert "served without the cache" in cache.unavailable
    cache.put(KEY, generation, VALUE)  # never raises
    assert cache.lookup(KEY, [])[0] is None  # left alone for retry_seconds: no wait at all
    redis_server.start()
    time.sleep(0.6)
    _, generation = cache.lookup(KEY, [])
    assert cache.unavailable is None
    cache.put(KEY, generation, VALUE)
    assert replica(redis_server.url).lookup(KEY, [])[0] == VALUE


# -- two serve replicas ----------------------------------------------------------------------


def cluster_config(milvus: str, redis_url: str, upstream: str) -> dict:
    retrievers = [
        {
            "name": "words",
            "backend": "milvus",
            "backend_config": {"collection": "cluster_text", "uri": milvus, "search": "full_text"},
        },
        {
            "name": "vectors",
            "backend": "milvus",
            "backend_config": {"collection": "cluster_vectors", "uri": milvus},
        },
    ]
    return {
        "retrievers": retrievers,
        "generator": {"min_similarity": None},
        "upstream": {"base_url": upstream, "timeouts": {"connect": 5, "read": 30}},
        "routing": {
            "default": "docs",
            "context_cache": {
                "backend": "redis",
                "url": redis_url,
                "namespace": "cluster-test",
                "timeout_seconds": 0.2,
                "retry_seconds": 0.5,
            },
            "decisions": [
                {
                    "name": "docs",
                    "model": "scripted",
                    "plugins": [
                        {"type": "rag", "configuration": {"retrievers": retrievers, "top_k": 3}}
                    ],
                }
            ],
        },
    }


def run_cli(args: list[str], cwd: Path) -> None:
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    done = subprocess.run(
        [str(BIN / "parallel-rag"), *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def ask(base: str, question: str, **rag) -> httpx.Response:
    body = {"model": "docs", "messages": [{"role": "user", "content": question}]}
    if rag:
        body["rag"] = rag
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response


@pytest.fixture(scope="module")
def cluster(milvus_server, tmp_path_factory):
    """The shared milvus-lite server, one redis-server, one scripted upstream, two serve
    replicas (each in its own folder, one config)."""
    directory = tmp_path_factory.mktemp("cluster")
    redis = RedisServer(directory).start()
    try:
        with contextlib.ExitStack() as stack:
            upstream = stack.enter_context(ScriptedServer(answer(200, CHAT_COMPLETION), path=""))
            config = cluster_config(milvus_server, redis.url, f"{upstream.url}/v1")
            text = yaml.safe_dump(config)
            bases = []
            for name in ("a", "b"):
                workdir = directory / name
                workdir.mkdir()
                (workdir / "cluster.yaml").write_text(text, encoding="utf-8")
                if name == "a":
                    run_cli(["--config", "cluster.yaml", "ingest", "--quiet", str(CORPUS)], workdir)
                _, base = stack.enter_context(running_serve(workdir / "cluster.yaml", workdir))
                bases.append(base)
            yield directory / "a", bases, redis
    finally:
        redis.stop()


def test_replicas_share_one_cache_and_an_ingest_empties_both(cluster, milvus_server):
    directory, (a, b), _ = cluster
    milvus = milvus_server
    question = "Who wrote the first computer program?"
    first = ask(a, question)
    assert first.headers["x-parallel-rag-cache"] == "miss"
    branches = {x["retriever"]: x["status"] for x in first.json()["parallel_rag"]["branches"]}
    assert branches == {"words": "ok", "vectors": "ok"}
    again = ask(b, "  who wrote the FIRST computer program? ")
    assert again.headers["x-parallel-rag-cache"] == "hit"
    assert again.json()["parallel_rag"]["documents"] == first.json()["parallel_rag"]["documents"]
    assert ask(b, question, tenant="acme").headers["x-parallel-rag-cache"] == "miss"

    note = directory / "extra"
    note.mkdir(exist_ok=True)
    text = "# Note\n\nAda Lovelace wrote the first computer program; zanzibarite is a mineral.\n"
    (note / "note.md").write_text(text)
    run_cli(["--config", "cluster.yaml", "ingest", "--quiet", str(note)], directory)
    after = ask(b, question)
    assert after.headers["x-parallel-rag-cache"] == "miss"
    assert int(after.headers["x-parallel-rag-cache-invalidations"]) >= 1

    # the new chunk is in both branches (both collections on the server), for both replicas
    found = [ask(base, "zanzibarite", top_k=1).json()["parallel_rag"] for base in (a, b)]
    assert found[0]["documents"] == found[1]["documents"] and len(found[0]["documents"]) == 1
    for report in found:
        assert {x["retriever"]: x["status"] for x in report["branches"]} == branches
    new_chunk = found[0]["documents"][0]
    for name, extra in (("words", {"search": "full_text"}), ("vectors", {})):
        settings = {"collection": f"cluster_{'text' if extra else 'vectors'}", "uri": milvus}
        entry = {"name": name, "backend": "milvus", "backend_config": {**settings, **extra}}
        retriever = build_retriever(
            ENTRY_MODELS["milvus"].model_validate(entry), directory, EmbeddingsConfig()
        )
        assert retriever.invoke("zanzibarite", k=1)[0].id == new_chunk, name


def test_redis_killed_mid_run_serves_with_a_warning_then_hits_again(cluster):
    _, (a, b), redis = cluster
    question = "What is BM25?"
    ask(a, question)
    redis.stop()
    for base in (a, b):
        down = ask(base, question)
        assert down.headers["x-parallel-rag-cache"] == "unavailable"
        assert "context cache unavailable" in down.headers["x-parallel-rag-warning"]
        assert down.json()["parallel_rag"]["documents"]
    redis.start()
    time.sleep(0.6)
    assert ask(a, question).headers["x-parallel-rag-cache"] == "miss"  # Redis came back empty
    assert ask(b, question).headers["x-parallel-rag-cache"] == "hit"


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"backend": "redis"}, "backend: redis needs url or url_env"),
        ({"backend": "redis", "url": "redis://h:1", "url_env": "R"}, "needs url or url_env"),
        ({"backend": "redis", "url": "http://h:1"}, "must be a redis:// or rediss:// URL"),
        ({"url": "redis://h:1"}, "url/url_env: only with backend: redis"),
        ({"backend": "memcached"}, "Input should be 'memory' or 'redis'"),
    ],
)
def test_cache_settings_are_checked(settings, expected):
    from parallel_rag.studio.router.configuration import ContextCacheConfig

    with pytest.raises(ValueError, match=expected):
        ContextCacheConfig.model_validate(settings)


def test_the_redis_password_never_shows(monkeypatch):
    from parallel_rag.backends.shared.secrets import redact
    from parallel_rag.studio.router.cache import context_cache
    from parallel_rag.studio.router.configuration import ContextCacheConfig

    url = f"redis://user:s3cret-pass@127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("CLUSTER_REDIS_URL", url)
    settings = ContextCacheConfig.model_validate(
        {"backend": "redis", "url_env": "CLUSTER_REDIS_URL"}
    )
    cache = context_cache("docs", settings)
    assert cache.lookup(KEY, [])[0] is None  # nothing listens there
    assert "s3cret-pass" not in cache.unavailable and "127.0.0.1" in cache.unavailable
    assert "s3cret-pass" not in redact(f"failed: {url} (password s3cret-pass)")
    assert "s3cret" not in json.dumps(
        ContextCacheConfig.model_validate({"backend": "redis", "url": url}).model_dump(mode="json")
    )
