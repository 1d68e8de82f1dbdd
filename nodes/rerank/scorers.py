"""Pair scorers for the per-branch ``rerank`` node, and the rules every scorer shares.

A scorer maps ``(query, [document, ...])`` to one finite float per document, higher meaning
more relevant. Each loads its model once per process (shared by every branch and request) and
serialises its own inference, so one instance is safe to call from many threads.

Token budget: ``max_tokens`` bounds what the model reads in one pass, counted with the model's
own tokenizer, special tokens included. ``overflow: reject`` refuses an over-long input with
``TokenBudgetError`` and never truncates; ``overflow: truncate`` cuts the document text (never
the query) to fit. The ``rerank`` node routes every scorer error through ``on_failure``.

``embedding`` (this module): cosine similarity between the query and each candidate under the
embedding model (the packaged all-MiniLM-L6-v2 by default). A bi-encoder reads the query and
each document separately, so its budget applies to each text on its own. ``cross_encoder``
lives in ``cross_encoder.py``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from parallel_rag.backends.encoders.embeddings import (
    BUNDLED,
    embedding_identity,
    load_embeddings,
    resolve_model,
)

Overflow = Literal["reject", "truncate"]
MAX_LISTED = 5
_tokenizer_lock = threading.Lock()


class ScorerError(RuntimeError):
    """A scorer could not produce scores for a request (handled by ``on_failure``)."""


class ScorerUnavailableError(ScorerError):
    """The scorer's model could not be found or loaded."""


class TokenBudgetError(ScorerError):
    """An input is longer than ``max_tokens`` and ``overflow`` is ``reject``."""

    def __init__(self, what: str, over: Sequence[tuple[int, int]], budget: int, total: int):
        self.over = list(over)
        self.budget = budget
        listed = ", ".join(f"rank {i + 1} ({n} tokens)" for i, n in self.over[:MAX_LISTED])
        more = f" and {len(self.over) - MAX_LISTED} more" if len(self.over) > MAX_LISTED else ""
        super().__init__(
            f"{len(self.over)} of {total} candidates exceed max_tokens {budget} ({what}): "
            f"{listed}{more}; refused without truncating (overflow: reject)"
        )


class QueryOverBudgetError(ScorerError):
    """The query alone leaves no room for any document within ``max_tokens``."""

    def __init__(self, tokens: int, budget: int, *, pair: bool = True):
        room = ", leaving no room for a document" if pair else ""
        super().__init__(
            f"the query alone uses {tokens} of max_tokens {budget} (special tokens included)" + room
        )


class ExitNotTrainedError(ValueError):
    """A ``layer``/``dimension`` the model was not trained for; ``field`` names the setting."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class BudgetSettingError(ValueError):
    """``max_tokens`` is above what the model can read at all."""

    field = "max_tokens"


def over_budget(counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """(position, tokens) of every count above ``budget``."""
    return [(i, n) for i, n in enumerate(counts) if n > budget]


def cosine_scores(query_vector: Any, doc_vectors: Any) -> list[float]:
    """Cosine similarity of each document vector with the query vector (0 for zero vectors)."""
    import numpy as np  # with the first vectors compared, not with the graph

    query_vector = np.asarray(query_vector, dtype=np.float64)
    doc_vectors = np.asarray(doc_vectors, dtype=np.float64).reshape(-1, query_vector.shape[-1])
    norms = np.linalg.norm(doc_vectors, axis=1) * np.linalg.norm(query_vector)
    return (doc_vectors @ query_vector / np.where(norms == 0, 1, norms)).tolist()


@lru_cache(maxsize=8)
def _counting_tokenizer(path: str):
    """A private tokenizer instance for counting: HF fast tokenizers must not be shared with a
    thread that is encoding under other truncation settings."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _model_limit(embeddings: Any, tokenizer: Any) -> int:
    """The longest input the embedding model reads (its ``max_seq_length``), special tokens in."""
    client = getattr(embeddings, "_client", None)  # the SentenceTransformer behind LangChain's
    limit = getattr(client, "max_seq_length", None)
    return int(limit or tokenizer.model_max_length)


class EmbeddingSimilarityScorer:
    """Re-scores candidates by embedding cosine similarity with the query.

    Uses the process-wide embedding model (the one dense retrievers share). Each text must fit
    ``max_tokens`` (default: the model's ``max_seq_length``, 256 for all-MiniLM-L6-v2), or
    ``overflow: truncate`` must be set: beyond that length the model would silently drop text.
    """

    def __init__(
        self,
        model: str = BUNDLED,
        device: str = "cpu",
        *,
        max_tokens: int | None = None,
        overflow: Overflow = "reject",
    ):
        self.model = model
        self.device = device
        self.max_tokens = max_tokens
        self.overflow = overflow
        self.limit: int | None = None

    @property
    def identity(self) -> str:
        return (
            f"embedding:{embedding_identity(self.model)}:max_tokens={self.budget}:{self.overflow}"
        )

    @property
    def budget(self) -> int | None:
        return self.max_tokens or self.limit

    def prepare(self) -> EmbeddingSimilarityScorer:
        """Load the model and tokenizer now (once per process) and check ``max_tokens``."""
        try:
            embeddings = load_embeddings(self.model, self.device)
            with _tokenizer_lock:
                tokenizer = _counting_tokenizer(resolve_model(self.model))
        except Exception as exc:
            raise ScorerUnavailableError(
                f"embedding model {self.model!r} could not be loaded: {exc}"
            ) from exc
        self.limit = _model_limit(embeddings, tokenizer)
        if self.max_tokens is not None and self.max_tokens > self.limit:
            raise BudgetSettingError(
                f"{self.max_tokens} is more than the embedding model reads "
                f"({self.limit} tokens, special tokens included)"
            )
        return self

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model reads for each text on its own, special tokens included."""
        with _tokenizer_lock:
            tokenizer = _counting_tokenizer(resolve_model(self.model))
            encoded = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def _truncate(self, text: str, budget: int) -> str:
        """The longest prefix of ``text`` whose tokens fit ``budget`` (special tokens in)."""
        with _tokenizer_lock:
            tokenizer = _counting_tokenizer(resolve_model(self.model))
            encoded = tokenizer(
                text, truncation=True, max_length=budget, return_offsets_mapping=True
            )
        ends = [end for start, end in encoded["offset_mapping"] if end > start]
        return text[: ends[-1]] if ends else ""

    def score(self, query: str, documents: list[str]) -> list[float]:
        if not documents:
            return []
        if self.limit is None:
            self.prepare()
        budget = self.budget
        assert budget is not None
        counts = self.count_tokens([query, *documents])
        if counts[0] > budget:
            raise QueryOverBudgetError(counts[0], budget, pair=False)
        over = over_budget(counts[1:], budget)
        if over and self.overflow == "reject":
            raise TokenBudgetError("each text + special tokens", over, budget, len(documents))
        documents = list(documents)
        for position, _ in over:
            documents[position] = self._truncate(documents[position], budget)
        distinct = list(dict.fromkeys(documents))  # identical texts tie exactly
        embeddings = load_embeddings(self.model, self.device)
        scores = cosine_scores(embeddings.embed_query(query), embeddings.embed_documents(distinct))
        by_text = dict(zip(distinct, scores, strict=True))
        return [by_text[doc] for doc in documents]
