"""Helpers for the server tests (LangGraph dev server, LangServe): a workspace holding a copy of
the example index and a YAML config, and the environment the server runs with (the server
process itself is ``servers.ServerProcess``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def server_workspace(
    example_index, directory: Path, extra: dict[str, Any], *, timeout_seconds: float = 300
) -> Path:
    """Copy the ingested example index into ``directory`` and write a config beside it: the
    retrievers it was ingested with, plus ``extra`` (more retrievers, rewriter, reranker...).
    A copy, because Qdrant local mode lets one process at a time open a folder. Branch timeouts
    are generous: the first query loads the embedding model, on a CPU other work shares."""
    config, base_dir, _ = example_index
    shutil.copytree(base_dir, directory, dirs_exist_ok=True)
    data = config.model_dump(mode="json", exclude_unset=True)
    retrievers = [
        {"timeout_seconds": timeout_seconds, **entry}
        for entry in data["retrievers"] + list(extra.pop("retrievers", []))
    ]
    path = directory / "parallel-rag.yaml"
    path.write_text(yaml.safe_dump({**data, "retrievers": retrievers, **extra}), encoding="utf-8")
    return path


def server_env(config_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PARALLEL_RAG_CONFIG=str(config_path),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        PYTHONUNBUFFERED="1",
    )
    return env
