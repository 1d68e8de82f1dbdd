"""The fusion ``k`` rule has one owner, ``nodes/fuse.py``'s ``method_for_k``: a ``k`` without a
method means RRF, a ``k`` beside a score method is refused. The configuration file's
``fusion:`` block (``FusionConfig``) and a run's knobs (``RAGContext``) both call it, so for
every method and ``k`` they agree, and each refusal names the caller's own fields."""

from __future__ import annotations

import pytest
from parallel_rag.graph.configuration import FusionConfig
from parallel_rag.graph.context import RAGContext
from parallel_rag.nodes.fuse import method_for_k
from pydantic import ValidationError

METHODS = [None, "rrf", "minmax", "zscore", "dbsf"]
SCORE_METHODS = ["minmax", "zscore", "dbsf"]


@pytest.mark.parametrize("method", METHODS)
def test_without_a_k_the_method_is_kept(method):
    assert method_for_k(method, k_given=False, k_path="k", method_path="method") == method


@pytest.mark.parametrize(("method", "expected"), [(None, "rrf"), ("rrf", "rrf")])
def test_a_k_without_a_method_or_with_rrf_means_rrf(method, expected):
    assert method_for_k(method, k_given=True, k_path="k", method_path="method") == expected


@pytest.mark.parametrize("method", SCORE_METHODS)
def test_a_k_beside_a_score_method_is_refused_naming_both_fields(method):
    with pytest.raises(ValueError) as caught:
        method_for_k(method, k_given=True, k_path="fusion.k", method_path="fusion.method")
    assert str(caught.value) == (
        f"k is the RRF constant, and fusion.method is {method!r}: drop fusion.k, "
        "or set fusion.method: rrf"
    )


def file_method(method: str | None, k: int | None) -> str:
    data = {k_name: v for k_name, v in (("method", method), ("k", k)) if v is not None}
    return FusionConfig.model_validate(data).method


def run_method(method: str | None, k: int | None) -> str | None:
    return RAGContext(fusion_method=method, fusion_k=k).fusion_method


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [None, 30])
def test_the_file_and_a_run_follow_the_same_rule(method, k):
    try:
        expected = method_for_k(method, k_given=k is not None, k_path="k", method_path="m")
    except ValueError:
        with pytest.raises(ValidationError, match="fusion.k"):
            file_method(method, k)
        with pytest.raises(ValidationError, match="drop fusion_k, or set fusion_method: rrf"):
            run_method(method, k)
        return
    assert run_method(method, k) == expected
    # the file fills an unset method with its default; a k alone or beside rrf is rrf
    assert file_method(method, k) == (expected or FusionConfig().method)


@pytest.mark.parametrize("method", SCORE_METHODS)
def test_each_refusal_names_its_callers_fields(method):
    with pytest.raises(ValidationError) as file_error:
        FusionConfig.model_validate({"method": method, "k": 30})
    assert "drop fusion.k, or set fusion.method: rrf" in str(file_error.value)
    with pytest.raises(ValidationError) as run_error:
        RAGContext(fusion_method=method, fusion_k=30)
    assert "drop fusion_k, or set fusion_method: rrf" in str(run_error.value)
    assert "fusion.k" not in str(run_error.value)
