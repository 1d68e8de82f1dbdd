"""The ``backend_config`` of a ``vectorstore`` retriever and where a store of that name lives:
pydantic and the standard library only, so the configuration schema holds it without importing
numpy or the encoders (``retriever.py`` does, when a configuration builds a ``vectorstore``
branch or ingest writes a store)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_ROOT = ".parallel-rag/vector_stores"


STORE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class VectorStoreSettings(BaseModel):
    """``backend_config`` of a ``vectorstore`` retriever (field names of a ``rag`` plugin
    configuration block, so one pastes in unchanged)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    vector_store_id: str = Field(pattern=STORE_ID)
    root: str = DEFAULT_ROOT
    file_ids: list[str] = Field(default_factory=list)

    def store_dir(self, base_dir: Path | None = None) -> Path:
        return store_path(self.root, self.vector_store_id, base_dir)


def store_path(root: str | os.PathLike, store_id: str, base_dir: Path | None = None) -> Path:
    path = Path(root).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path.resolve() / store_id


def named_store(store_id: str, configured: Sequence[VectorStoreSettings]) -> dict[str, Any]:
    """The store ``parallel-rag ingest --store NAME`` writes: NAME under the first configured
    ``vectorstore``'s root, else under the default root."""
    root = configured[0].root if configured else DEFAULT_ROOT
    return {"vector_store_id": store_id, "root": root}
