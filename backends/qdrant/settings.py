"""The ``backend_config`` of a ``qdrant`` retriever: pydantic and the standard library only, so
the configuration schema holds it without importing ``qdrant-client`` (``retriever.py`` does,
where it opens a client, when a configuration builds a ``qdrant`` branch or writes its
collection)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

DEFAULT_PATH = ".parallel-rag/qdrant"


class QdrantSettings(BaseModel):
    """``backend_config`` of a ``qdrant`` retriever (field names of a ``rag`` plugin
    configuration block, so one pastes in unchanged)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    collection: str = Field(default="parallel_rag", min_length=1)
    content_field: str = Field(default="content", min_length=1)
    metadata_field: str = Field(default="metadata", min_length=1)
    path: str | None = None
    location: str | None = None
    url: str | None = None
    api_key: SecretStr | None = None
    reuse_cache_connection: bool | None = Field(
        default=None,
        description="accepted so rag plugin blocks paste in; clients are always shared",
    )

    @model_validator(mode="after")
    def _one_connection(self) -> QdrantSettings:
        given = [name for name in ("path", "location", "url") if getattr(self, name)]
        if len(given) > 1:
            raise ValueError(f"give only one of path, location, url (got {', '.join(given)})")
        if not given:
            self.path = DEFAULT_PATH
        return self

    def connection_key(self, base_dir: Path | None = None) -> tuple[str, str]:
        if self.url:
            return ("url", self.url)
        if self.location:
            return ("location", self.location)
        path = Path(self.path or DEFAULT_PATH)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return ("path", str(path.resolve()))
