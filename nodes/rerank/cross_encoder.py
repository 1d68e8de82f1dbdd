"""The ``cross_encoder`` scorer: a sentence-transformers ``CrossEncoder`` reading each
(query, document) pair through the model's own pair template, batched, on CPU by default.

Any local directory or cached Hugging Face name works (a ``bge-reranker`` or
``cross-encoder/ms-marco-MiniLM-L6-v2`` download drops in by path). Scores are the raw relevance
logits: uncalibrated, comparable only within one model, never a similarity threshold.

Trained exits (the ``pair_scorer`` settings). ``layer`` picks the encoder depth the score
head reads and ``dimension`` the leading features of the pooled representation it reads; 0
means the model's full depth or width. A model declares the extra exits it was trained for in
``pair_scorer.json`` beside its weights::

    {"exits": [{"layer": 3, "dimension": 384}, {"layer": 6, "dimension": 192}]}

Without that file only full depth and width are allowed. The check reads only the model's
config and that file, so a bad exit is refused when the graph is built, before any weights load.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parallel_rag.nodes.rerank.scorers import (
    BudgetSettingError,
    ExitNotTrainedError,
    Overflow,
    QueryOverBudgetError,
    ScorerUnavailableError,
    TokenBudgetError,
    over_budget,
)

EXITS_FILE = "pair_scorer.json"
DEFAULT_BATCH_SIZE = 32
ONE_TOKEN_DOCUMENT = "x"
_cache_lock = threading.Lock()
_loaded: dict[tuple[str, str, int, int], LoadedCrossEncoder] = {}


@dataclass(frozen=True)
class ModelShape:
    """What a checkpoint's config says about its depth, width and longest input."""

    depth: int
    width: int
    positions: int | None


class ModelFormatError(ValueError):
    """The model or its ``pair_scorer.json`` cannot serve as a relevance scorer."""

    field = "model"


def _quiet_transformers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


def read_shape(model: str) -> ModelShape:
    """Depth, width and position limit from the model's config (no weights are read)."""
    _quiet_transformers()
    local = Path(model).expanduser()
    if (local.is_absolute() or model.startswith((".", "~"))) and not local.exists():
        raise ScorerUnavailableError(f"cross-encoder model {model!r} not found: no such path")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model)
    except Exception as exc:  # missing path, offline without cache, broken config
        raise ScorerUnavailableError(f"cross-encoder model {model!r} not found: {exc}") from exc
    depth = getattr(config, "num_hidden_layers", None)
    width = getattr(config, "hidden_size", None)
    if not isinstance(depth, int) or not isinstance(width, int):
        raise ModelFormatError(f"{model!r}: its config declares no num_hidden_layers/hidden_size")
    positions = getattr(config, "max_position_embeddings", None)
    return ModelShape(depth, width, positions if isinstance(positions, int) else None)


def _exits_path(model: str) -> Path | None:
    local = Path(model).expanduser()
    if local.is_dir():
        candidate = local / EXITS_FILE
        return candidate if candidate.is_file() else None
    from transformers.utils import cached_file

    try:
        found = cached_file(
            model,
            EXITS_FILE,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
        )
    except Exception:
        return None
    return Path(found) if found else None


def declared_exits(model: str) -> list[tuple[int, int]]:
    """The (layer, dimension) exits ``pair_scorer.json`` declares; [] without the file."""
    path = _exits_path(model)
    if path is None:
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        exits = data["exits"]
        pairs = [(exit_["layer"], exit_["dimension"]) for exit_ in exits]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelFormatError(
            f'{path}: expected {{"exits": [{{"layer": int, "dimension": int}}, ...]}} ({exc})'
        ) from exc
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for p in pairs for v in p):
        raise ModelFormatError(f"{path}: layer and dimension must be non-negative integers")
    return pairs


def check_exit(
    layer: int, dimension: int, shape: ModelShape, exits: list[tuple[int, int]], model: str = ""
) -> tuple[int, int]:
    """Resolve 0 to full depth/width and refuse an exit the model was not trained for.

    Returns the concrete (layer, dimension). ``ExitNotTrainedError.field`` names the setting.
    """
    resolved = (layer or shape.depth, dimension or shape.width)
    if resolved[0] > shape.depth:
        raise ExitNotTrainedError(
            "layer", f"{layer} is deeper than the model ({shape.depth} layers; 0 = full depth)"
        )
    if resolved[1] > shape.width:
        raise ExitNotTrainedError(
            "dimension", f"{dimension} is wider than the model ({shape.width}; 0 = full width)"
        )
    full = (shape.depth, shape.width)
    trained = {full} | {(lay or shape.depth, dim or shape.width) for lay, dim in exits}
    if resolved in trained:
        return resolved
    where = (
        f"{EXITS_FILE} declares {sorted(trained - {full})}"
        if exits
        else f"it has no {EXITS_FILE}, so only full depth and width ({full}) are allowed"
    )
    field = "layer" if resolved[0] not in {lay for lay, _ in trained} else "dimension"
    value = layer if field == "layer" else dimension
    raise ExitNotTrainedError(
        field,
        f"{value} is not a trained exit of {model or 'the model'}: (layer, dimension) = "
        f"{resolved} was not trained; {where}",
    )


def _leading_features_linear(linear: Any, dimension: int) -> Any:
    """A linear layer that reads only the first ``dimension`` input features."""
    import torch.nn.functional as functional
    from torch import nn

    class LeadingFeatures(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = linear
            self.dimension = dimension

        def forward(self, features):
            weight = self.inner.weight[:, : self.dimension]
            return functional.linear(features[..., : self.dimension], weight, self.inner.bias)

    return LeadingFeatures()


def apply_exit(hf_model: Any, layer: int, dimension: int, shape: ModelShape) -> None:
    """Cut a sequence-classification model to a (layer, dimension) exit, in place."""
    from torch import nn

    arch = type(hf_model).__name__
    if layer < shape.depth:
        encoder = getattr(getattr(hf_model, "base_model", None), "encoder", None)
        layers = getattr(encoder, "layer", None)
        if not isinstance(layers, nn.ModuleList):
            raise ExitNotTrainedError("layer", f"selecting a layer is not supported for {arch}")
        encoder.layer = layers[:layer]
        hf_model.config.num_hidden_layers = layer
    if dimension < shape.width:
        head = getattr(hf_model, "classifier", None)
        owner, name = (hf_model, "classifier") if isinstance(head, nn.Linear) else (head, "dense")
        linear = getattr(owner, name, None)
        if not isinstance(linear, nn.Linear) or linear.in_features != shape.width:
            raise ExitNotTrainedError(
                "dimension", f"selecting a dimension is not supported for {arch}'s score head"
            )
        setattr(owner, name, _leading_features_linear(linear, dimension))


class LoadedCrossEncoder:
    """One CrossEncoder in memory at one exit, with the lock that serialises its use.

    Shared by every scorer, branch and request that names the same model, device and exit.
    """

    def __init__(self, model: str, device: str, layer: int, dimension: int):
        shape = read_shape(model)
        self.layer, self.dimension = check_exit(
            layer, dimension, shape, declared_exits(model), model
        )
        self.model_name = model
        self.device = device
        self.lock = threading.RLock()
        from sentence_transformers import CrossEncoder

        try:
            self.model = CrossEncoder(model, device=device)
        except Exception as exc:
            raise ScorerUnavailableError(
                f"cross-encoder model {model!r} could not be loaded: {exc}"
            ) from exc
        if self.model.num_labels != 1:
            raise ModelFormatError(
                f"{model!r} has {self.model.num_labels} outputs; a relevance scorer has one"
            )
        apply_exit(self.model.model, self.layer, self.dimension, shape)
        self.model.eval()
        limits = [self.model.max_seq_length, shape.positions]
        self.limit = min(int(v) for v in limits if v)

    def count_pairs(self, query: str, documents: list[str]) -> list[int]:
        """Tokens of each (query, document) under the model's pair template, specials in."""
        with self.lock:
            features = self.model.preprocess(
                [(query, doc) for doc in documents],
                processing_kwargs={"text": {"truncation": False, "verbose": False}},
            )
        return [int(n) for n in features["attention_mask"].sum(dim=1).tolist()]

    def predict(
        self, query: str, documents: list[str], *, batch_size: int, truncate_to: int | None
    ) -> list[float]:
        """Raw relevance logits, in batches; ``truncate_to`` cuts only the document."""
        import torch

        kwargs: dict[str, Any] = {}
        if truncate_to is not None:
            kwargs["processing_kwargs"] = {
                "text": {"truncation": "only_second", "max_length": truncate_to}
            }
        with self.lock:
            scores = self.model.predict(
                [(query, doc) for doc in documents],
                batch_size=batch_size,
                activation_fn=torch.nn.Identity(),
                show_progress_bar=False,
                **kwargs,
            )
        return [float(s) for s in scores.reshape(-1).tolist()]


def load_cross_encoder(
    model: str, device: str = "cpu", layer: int = 0, dimension: int = 0
) -> LoadedCrossEncoder:
    """The process-wide instance for (model, device, layer, dimension); loads it once.

    Failures are not cached: a model that appears later is picked up by the next call.
    """
    key = (model, device, layer, dimension)
    with _cache_lock:
        loaded = _loaded.get(key)
        if loaded is None:
            loaded = _loaded[key] = LoadedCrossEncoder(model, device, layer, dimension)
        return loaded


class CrossEncoderScorer:
    """Scores (query, document) pairs with a shared cross-encoder under a token budget."""

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        layer: int = 0,
        dimension: int = 0,
        max_tokens: int | None = None,
        overflow: Overflow = "reject",
        batch_size: int = DEFAULT_BATCH_SIZE,
    ):
        self.model = model
        self.device = device
        self.layer = layer
        self.dimension = dimension
        self.max_tokens = max_tokens
        self.overflow = overflow
        self.batch_size = batch_size
        self.loaded: LoadedCrossEncoder | None = None

    @property
    def budget(self) -> int | None:
        return self.max_tokens or (self.loaded.limit if self.loaded else None)

    @property
    def identity(self) -> str:
        return (
            f"cross_encoder:{self.model}:layer={self.layer}:dimension={self.dimension}:"
            f"max_tokens={self.budget}:{self.overflow}"
        )

    def prepare(self) -> CrossEncoderScorer:
        """Check the exit and load the model now (once per process); check ``max_tokens``."""
        loaded = load_cross_encoder(self.model, self.device, self.layer, self.dimension)
        if self.max_tokens is not None and self.max_tokens > loaded.limit:
            raise BudgetSettingError(
                f"{self.max_tokens} is more than the cross-encoder reads ({loaded.limit} tokens "
                "for query + document + special tokens)"
            )
        self.loaded = loaded
        return self

    def score(self, query: str, documents: list[str]) -> list[float]:
        """One raw logit per document. Identical texts are scored once, so they tie exactly
        (the same pair in two rows of a batch can differ in the last bits)."""
        if not documents:
            return []
        loaded = self.loaded or self.prepare().loaded
        assert loaded is not None
        budget = self.budget
        assert budget is not None
        with loaded.lock:  # count and score as one step: one tokenizer, one model at a time
            # ("" would drop the pair's second separator; one token stands for "any document")
            counts = loaded.count_pairs(query, [ONE_TOKEN_DOCUMENT, *documents])
            if counts[0] > budget:
                raise QueryOverBudgetError(counts[0] - 1, budget)
            over = over_budget(counts[1:], budget)
            if over and self.overflow == "reject":
                raise TokenBudgetError(
                    "query + document + special tokens", over, budget, len(documents)
                )
            distinct = list(dict.fromkeys(documents))
            scores = loaded.predict(
                query,
                distinct,
                batch_size=self.batch_size,
                truncate_to=budget if over else None,
            )
        by_text = dict(zip(distinct, scores, strict=True))
        return [by_text[doc] for doc in documents]
