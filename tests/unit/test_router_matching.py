"""Which route a request takes, without embeddings (studio/router/matching.py): a route named by
``model``, an unknown model's 404, keywords first for ``auto``; and the models listing."""

from __future__ import annotations

import pytest
from parallel_rag.studio.router.configuration import parse_router
from parallel_rag.studio.router.errors import RouterError
from parallel_rag.studio.router.runtime import RouterRuntime
from router_recipes import recipe


def runtime(tmp_path) -> RouterRuntime:
    return RouterRuntime(parse_router(recipe()), tmp_path, compile_graphs=False)


def test_model_naming_a_route_selects_it(tmp_path):
    choice = runtime(tmp_path).matcher.choose("qdrant-docs", "anything")
    assert (choice.name, choice.reason) == ("qdrant-docs", "model")


def test_unknown_model_is_404_model_not_found(tmp_path):
    with pytest.raises(RouterError) as caught:
        runtime(tmp_path).matcher.choose("gpt-nope", "hi")
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        404,
        "model_not_found",
        "model",
    )


def test_auto_keyword_match_comes_first(tmp_path):
    choice = runtime(tmp_path).matcher.choose("auto", "How does BM25 weigh terms?")
    assert (choice.name, choice.reason) == ("parallel", "keyword")
    assert choice.signals["keywords"] == {"parallel": ["bm25"]}
    # a keyword is a whole word: "bm250" is not "bm25"
    assert runtime(tmp_path).matcher.keyword_hits("the bm250 codec") == {}


def test_models_lists_auto_and_every_route(tmp_path):
    ids = [m["id"] for m in runtime(tmp_path).models()["data"]]
    assert ids == ["auto", "milvus-docs", "qdrant-docs", "ranked", "parallel", "chat", "disabled"]
