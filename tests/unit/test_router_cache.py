"""The router's context cache (studio/router/cache.py): LRU, TTL, invalidation when a route's
stores change, the normalised query it keys on."""

from __future__ import annotations

from parallel_rag.studio.router.cache import ContextCache, normalised_query, store_generation


def test_cache_lru_ttl_and_invalidation():
    now = [0.0]
    cache = ContextCache(max_entries=2, ttl=10, clock=lambda: now[0])
    generation = (("index", 1, 1),)
    assert cache.get(("a",), generation) is None
    cache.put(("a",), generation, "A")
    cache.put(("b",), generation, "B")
    assert cache.get(("a",), generation) == "A"
    cache.put(("c",), generation, "C")  # evicts b, the least recently used
    assert cache.get(("b",), generation) is None
    assert cache.get(("a",), generation) == "A"
    now[0] = 11
    assert cache.get(("a",), generation) is None  # expired
    cache.put(("a",), generation, "A")
    assert cache.get(("a",), (("index", 2, 2),)) is None  # an ingest changed the store
    assert cache.stats.invalidations == 1
    assert (cache.stats.hits, cache.stats.misses) == (2, 4)


def test_normalised_query():
    assert normalised_query("  When  was\tAda BORN? ") == "when was ada born?"


def test_store_generation_changes_when_files_change(tmp_path):
    folder = tmp_path / "index"
    folder.mkdir()
    (folder / "a.json").write_text("1")
    before = store_generation([folder, tmp_path / "missing"])
    assert store_generation([folder, tmp_path / "missing"]) == before
    (folder / "b.json").write_text("2")
    assert store_generation([folder, tmp_path / "missing"]) != before
