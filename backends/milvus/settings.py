"""The ``backend_config`` of a ``milvus`` retriever: pydantic, the standard library and the
filter-expression checks only, so the configuration schema holds it without importing
``langchain-milvus`` or ``pymilvus`` (``retriever.py`` does, when a configuration builds a
``milvus`` branch or writes its collection)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from parallel_rag.backends.milvus.expressions import FIELD_NAME, check_filter_expression
from parallel_rag.backends.shared.secrets import secret_value
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

DEFAULT_URI = ".parallel-rag/milvus.db"
DEFAULT_SPARSE_FIELD = "sparse"
DEFAULT_BM25_K1 = 1.5
DEFAULT_BM25_B = 0.75


FULL_TEXT_ONLY = ("sparse_field", "analyzer_params", "bm25_k1", "bm25_b")
"""Settings that only mean something with ``search: full_text``."""


class MilvusSettings(BaseModel):
    """``backend_config`` of a ``milvus`` retriever (field names of a ``rag`` plugin
    configuration block, so one pastes in unchanged)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    collection: str = Field(pattern=FIELD_NAME)
    search: Literal["dense", "full_text"] = Field(
        default="dense",
        description="dense: cosine over the embeddings; full_text: BM25 inside Milvus (lexical)",
    )
    sparse_field: str | None = Field(default=None, pattern=FIELD_NAME)
    analyzer_params: dict[str, Any] | None = Field(
        default=None,
        description="the text field's analyzer, as Milvus takes it (unset: 'standard')",
    )
    bm25_k1: float | None = Field(default=None, gt=0)
    bm25_b: float | None = Field(default=None, ge=0, le=1)
    content_field: str = Field(default="content", pattern=FIELD_NAME)
    metadata_field: str | None = Field(default=None, pattern=FIELD_NAME)
    primary_field: str = Field(default="pk", pattern=FIELD_NAME)
    vector_field: str = Field(default="vector", pattern=FIELD_NAME)
    filter_expression: str | None = None
    uri: str = DEFAULT_URI
    token: SecretStr | None = None
    db_name: str | None = Field(default=None, pattern=FIELD_NAME)
    consistency_level: Literal["Strong", "Session", "Bounded", "Eventually"] = "Session"
    reuse_cache_connection: bool | None = Field(
        default=None,
        description="accepted so rag plugin blocks paste in; clients are always shared",
    )

    @field_validator("filter_expression")
    @classmethod
    def _safe_expression(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return check_filter_expression(value)

    @model_validator(mode="after")
    def _full_text_settings_need_full_text(self) -> MilvusSettings:
        if self.search != "full_text":
            for name in FULL_TEXT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only applies with search: full_text")
        return self

    @property
    def full_text(self) -> bool:
        return self.search == "full_text"

    @property
    def sparse(self) -> str:
        """The BM25 output field of a full-text collection."""
        return self.sparse_field or DEFAULT_SPARSE_FIELD

    def full_text_index_params(self) -> dict[str, Any]:
        """The sparse field's index (``SPARSE_INVERTED_INDEX``, metric ``BM25``); k1 and b
        default to the ``bm25`` backend's, not the engine's (Milvus's own k1 is 1.2)."""
        return {
            "metric_type": "BM25",
            "index_type": "SPARSE_INVERTED_INDEX",
            "params": {
                "bm25_k1": DEFAULT_BM25_K1 if self.bm25_k1 is None else self.bm25_k1,
                "bm25_b": DEFAULT_BM25_B if self.bm25_b is None else self.bm25_b,
            },
        }

    @property
    def is_server(self) -> bool:
        return bool(re.match(r"^(https?|tcp|grpc)://", self.uri))

    def resolved_uri(self, base_dir: Path | None = None) -> str:
        if self.is_server:
            return self.uri
        path = Path(self.uri).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return str(path.resolve())

    def connection_args(self, base_dir: Path | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"uri": self.resolved_uri(base_dir)}
        token = secret_value(self.token)
        if token:
            args["token"] = token
        if self.db_name:
            args["db_name"] = self.db_name
        return args


def threshold_refusal(settings: MilvusSettings) -> str | None:
    """Why ``similarity_threshold`` cannot apply to these settings (None when it can)."""
    if settings.full_text:
        return "search: full_text scores are BM25 scores, unbounded and not a similarity"
    return None
