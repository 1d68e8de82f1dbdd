"""Loading the pipeline configuration: which file (argument, ``$PARALLEL_RAG_CONFIG``,
./parallel-rag.yaml, else the embedded defaults), YAML parsing, and validation errors as one
line per problem naming the field by its path in the file (``graph/errors.py`` writes them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from parallel_rag.graph.configuration import ConfigError, PipelineConfig
from parallel_rag.graph.errors import problems
from pydantic import ValidationError

DEFAULT_CONFIG_FILE = "parallel-rag.yaml"
CONFIG_ENV = "PARALLEL_RAG_CONFIG"


def default_config_dict() -> dict[str, Any]:
    """The embedded defaults: BM25 plus Qdrant Edge (Qdrant's engine in-process, HNSW) on the
    packaged MiniLM embeddings."""
    return {
        "retrievers": [
            {"name": "lexical", "backend": "bm25"},
            {"name": "dense", "backend": "qdrant_edge"},
        ]
    }


def parse_config(
    data: dict[str, Any] | PipelineConfig,
    *,
    source: str = "configuration",
    extra_retrievers: list[str] | None = None,
    extra_dense: list[str] | None = None,
) -> PipelineConfig:
    """Validate a config mapping; raise ``ConfigError`` naming each bad field."""
    if isinstance(data, PipelineConfig):
        data = data.model_dump(exclude_unset=True)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the configuration must be a mapping, got {type(data).__name__}"
        )
    try:
        return PipelineConfig.model_validate(
            data,
            context={
                "extra_retrievers": extra_retrievers or [],
                "extra_dense": extra_dense or [],
            },
        )
    except ValidationError as error:
        raise ConfigError.invalid("configuration", source, problems(error, data)) from None


def config_path(path: str | os.PathLike | None = None) -> Path | None:
    """The config file to use: the argument, ``$PARALLEL_RAG_CONFIG``, or ./parallel-rag.yaml."""
    if path is not None:
        return Path(path)
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None


def load_config(
    path: str | os.PathLike | None = None,
    *,
    extra_retrievers: list[str] | None = None,
    extra_dense: list[str] | None = None,
) -> tuple[PipelineConfig, Path]:
    """Load and validate a YAML config; returns it with the directory relative paths start from.

    With no file anywhere, the embedded defaults are used with the current directory as base.
    ``extra_retrievers``/``extra_dense`` name retriever objects supplied in code, so a file
    that relies on them (e.g. ``retrievers: []``) validates with them counted.
    """
    extras = {"extra_retrievers": extra_retrievers, "extra_dense": extra_dense}
    chosen = config_path(path)
    if chosen is None:
        return (
            parse_config(default_config_dict(), source="embedded defaults", **extras),
            Path.cwd(),
        )
    data = read_yaml(chosen)
    return parse_config(data, source=str(chosen), **extras), chosen.parent.resolve()


def read_yaml(path: str | os.PathLike) -> Any:
    """A config file's YAML (an empty file is an empty mapping); ``ConfigError`` names the
    file when it is missing or not YAML."""
    import yaml  # only when a file is read: the embedded defaults need no YAML parser

    chosen = Path(path)
    if not chosen.is_file():
        raise ConfigError(f"config file not found: {chosen}")
    try:
        data = yaml.safe_load(chosen.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"{chosen}: not valid YAML: {error}") from None
    return data or {}
