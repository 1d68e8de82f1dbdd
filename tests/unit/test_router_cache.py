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


# -- the key: what a conversation was retrieved on ----------------------------------------


def _pipeline():
    from parallel_rag.studio.router.configuration import parse_router
    from router_recipes import recipe

    return parse_router(recipe()).pipeline_for("parallel")


def _key(conversation, **rag):
    """The key the router computes for ``conversation`` (role/content pairs, as an OpenAI
    client sends them): its text turns, resolved as the route's graph resolves them."""
    from parallel_rag.studio.router.cache import cache_key
    from parallel_rag.studio.router.conversation import resolution_of
    from parallel_rag.studio.router.request import conversation_turns

    messages = [{"role": role, "content": content} for role, content in conversation]
    resolution = resolution_of(conversation_turns(messages))
    return cache_key("parallel", _pipeline(), resolution, {"top_k": 4, **rag})


MILLAU = [
    ("user", "Which bridge carries the A75 autoroute in France?"),
    ("assistant", "The Millau Viaduct."),
    ("user", "Who designed it?"),
]
BROOKLYN = [
    ("user", "Which bridge in New York City opened in 1883?"),
    ("assistant", "The Brooklyn Bridge."),
    ("user", "Who designed it?"),
]


def test_the_same_follow_up_in_two_conversations_gets_two_keys():
    # keyed on the last message alone, both would share one entry (and its evidence)
    assert _key(MILLAU) != _key(BROOKLYN)
    assert "who designed the millau viaduct?" in _key(MILLAU)
    assert "who designed the brooklyn bridge?" in _key(BROOKLYN)


def test_a_repeat_of_the_same_conversation_has_the_same_key():
    assert _key(MILLAU) == _key(list(MILLAU))
    # what is not a text turn changes nothing retrieved, so nothing in the key
    noisy = [("system", "Be brief."), *MILLAU[:2], ("tool", "42"), MILLAU[2]]
    assert _key(noisy) == _key(MILLAU)


def test_a_first_question_keys_as_before_normalised():
    alone = _key([("user", "When was Ada Lovelace born?")])
    assert alone == _key([("user", "  when was ada LOVELACE born? ")])
    assert alone != _key([("user", "When was Ada Lovelace born?")], tenant="acme")
    assert alone != _key([("user", "When was Ada Lovelace born?")], top_k=1)
    assert alone != _key([("user", "When was Ada Lovelace born?")], filters={"title": "x"})


def test_a_self_contained_question_after_a_conversation_keys_as_the_question_alone():
    # nothing refers back: retrieved on as written, so it shares the first question's entry
    question = "When was Ada Lovelace born?"
    after = [*MILLAU, ("assistant", "Michel Virlogeux."), ("user", question)]
    assert _key(after) == _key([("user", question)])


def test_the_question_as_written_is_in_the_key_beside_what_it_resolved_to():
    from parallel_rag.studio.router.cache import cache_key

    def key(question: str, retrieved_on: str):
        resolution = {"question": question, "retrieved_on": retrieved_on, "method": "carry_over"}
        return cache_key("parallel", _pipeline(), resolution, {"top_k": 4})

    # the as-written question is searched as a view of its own when it differs
    written_out = key("Who designed it?", "Who designed The Millau Viaduct?")
    assert written_out != key(
        "Who designed the Millau Viaduct?", "Who designed the Millau Viaduct?"
    )
    assert written_out != key("Who built it?", "Who designed The Millau Viaduct?")
    assert written_out == key(" who designed IT? ", "who designed the millau  viaduct?")
