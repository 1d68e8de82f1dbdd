"""The rag plugin's reranker binding (docs/router.md, "The reranker binding"), accepted as
printed: a model in ``global.model_catalog`` (``deployments``) bound to the rag plugin by
``routing.model_bindings["rag.reranker"]`` with a ``contract`` and a
``pair_scorer {layer, dimension}``. A route opts in with ``rerank:``; the
binding becomes that route's cross-encoder reranker (``bound_reranker``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

RERANKER_BINDING = "rag.reranker"
RELEVANCE_CONTRACT = "relevance_scores.v1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeploymentInput(_Strict):
    max_tokens: int | None = Field(default=None, gt=0)
    overflow: Literal["reject", "truncate"] = "reject"


class Deployment(_Strict):
    """A model in the catalog: ``artifact`` is a local path (relative to the file) or a cached
    Hugging Face name; it runs in this process (``provider: model_runtime``)."""

    artifact: str = Field(min_length=1)
    provider: Literal["model_runtime"] = "model_runtime"
    device: str = "cpu"
    input: DeploymentInput = Field(default_factory=DeploymentInput)


class ModelCatalog(_Strict):
    deployments: dict[str, Deployment] = Field(default_factory=dict)


class GlobalConfig(_Strict):
    model_catalog: ModelCatalog = Field(default_factory=ModelCatalog)


class PairScorerSettings(_Strict):
    """The trained exit of the cross-encoder (0 = the artifact's full depth or width)."""

    layer: int = Field(default=0, ge=0)
    dimension: int = Field(default=0, ge=0)


class RerankerBinding(_Strict):
    deployment: str = Field(min_length=1)
    contract: Literal["relevance_scores.v1"] = RELEVANCE_CONTRACT
    pair_scorer: PairScorerSettings = Field(default_factory=PairScorerSettings)


class RagBindings(_Strict):
    reranker: RerankerBinding | None = None


class ModelBindings(_Strict):
    """``rag.reranker`` (as printed, a dotted key) or nested ``rag: {reranker: ...}``."""

    rag: RagBindings = Field(default_factory=RagBindings)

    @model_validator(mode="before")
    @classmethod
    def _dotted_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and RERANKER_BINDING in data:
            data = dict(data)
            nested = dict(data.get("rag") or {})
            if "reranker" in nested:
                raise ValueError(f"give {RERANKER_BINDING!r} or rag.reranker, not both")
            nested["reranker"] = data.pop(RERANKER_BINDING)
            data["rag"] = nested
        return data


def bound_reranker(
    bindings: ModelBindings,
    catalog: ModelCatalog,
    *,
    where: str,
    on_failure: str,
    top_k: int | None,
    max_candidates: int | None = None,
) -> dict[str, Any]:
    """The cross-encoder ``reranker`` block a route's ``rerank:`` opt-in stands for (``where``
    is the route's plugin path, named when the binding is missing)."""
    binding = bindings.rag.reranker
    if binding is None:
        raise ValueError(
            f"{where}.rerank: needs routing.model_bindings['{RERANKER_BINDING}'] "
            "(a deployment with a pair_scorer)"
        )
    deployment = catalog.deployments.get(binding.deployment)
    if deployment is None:
        raise ValueError(
            f"routing.model_bindings.{RERANKER_BINDING}.deployment: "
            f"{binding.deployment!r} is not in global.model_catalog.deployments"
        )
    reranker = {
        "kind": "cross_encoder",
        "model": deployment.artifact,
        "device": deployment.device,
        "overflow": deployment.input.overflow,
        "layer": binding.pair_scorer.layer,
        "dimension": binding.pair_scorer.dimension,
        "on_failure": on_failure,
    }
    if deployment.input.max_tokens is not None:
        reranker["max_tokens"] = deployment.input.max_tokens
    if top_k is not None:
        reranker["top_k"] = top_k
    if max_candidates is not None:
        reranker["max_candidates"] = max_candidates
    return reranker
