"""The multi-tenant corpus (``backend_servers.TENANT_DOCS``) as session fixtures, written once
per test process: a JSONL file for the store ingestion tests and a saved BM25 index for the
fault and load tests. Both are read-only to the tests that use them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backend_servers import TENANT_DOCS


def write_tenant_jsonl(path: Path, docs: list[dict]) -> Path:
    """``docs`` (records of ``TENANT_DOCS``) as a JSONL file: tenant in each record's metadata."""
    lines = [
        json.dumps({"id": d["id"], "text": d["content"], "metadata": {"tenant": d["tenant"]}})
        for d in docs
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tenant_corpus_file(tmp_path_factory) -> Path:
    """The multi-tenant corpus as a JSONL file: tenant in each record's metadata."""
    return write_tenant_jsonl(
        tmp_path_factory.mktemp("tenant-corpus") / "tenants.jsonl", TENANT_DOCS
    )


@pytest.fixture(scope="session")
def tenant_bm25_dir(tmp_path_factory) -> Path:
    """A directory holding ``bm25/``: the corpus as a BM25 index, tenant and source in each
    chunk's metadata."""
    from parallel_rag.backends.bm25.index import BM25Index

    directory = tmp_path_factory.mktemp("tenant-bm25")
    chunks = [
        (doc["id"], doc["content"], {"tenant": doc["tenant"], "source": doc["source"]})
        for doc in TENANT_DOCS
    ]
    BM25Index.from_chunks(chunks).save(directory / "bm25")
    return directory
