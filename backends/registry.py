"""Every retrieval backend parallel-rag can build, one line each.

A backend is a package ``backends/<name>/``: its settings model in ``settings.py`` (pydantic
and the standard library only), its retriever and store writer in ``retriever.py`` (and any
modules beside it), and a ``BACKEND = BackendSpec(...)`` entry in its ``__init__.py`` whose
factory and store hooks import ``retriever.py`` when they are called (see
``base.BackendSpec``); adding one is that package plus its name in ``MODULES`` below
(docs/adding-a-backend.md walks through one). Importing this registry imports each package,
so the settings of every backend, never a retriever module or a client library: those load
when a configuration builds or writes the backend.

The configuration schema (each backend's entry model and the unions ``retrievers:`` and a
hybrid's legs accept), the factory dispatch from an entry to its retriever, the stores
``parallel-rag ingest`` writes, the files a router's context cache watches, the backends
``parallel-rag eval`` can index, the ones the ``prf`` rewriter can read, the setting names a
run may never set and a route preview's view of each entry are all derived from ``BACKENDS``,
through the helpers below: nothing outside ``backends/`` needs to name a backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module
from pathlib import Path
from typing import Any

from parallel_rag.backends.base import BackendContext, BackendSpec, SettingsStore, StoreWriter

MODULES = (
    "bm25",
    "qdrant",
    "qdrant_edge",
    "milvus",
    "external_api",
    "openai_file_search",
    "vectorstore",
    "hybrid",
    "mcp",
)
"""The backend packages under ``parallel_rag.backends``, each defining ``BACKEND``."""


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (import_module(f"parallel_rag.backends.{module}").BACKEND for module in MODULES)
}
"""Every registered backend by its ``backend:`` name."""

REFUSED: dict[str, str] = {}
"""Backend names a configuration may spell but that are refused at load time, with why."""


def store_writer(backend: str, settings: Any, context: BackendContext) -> StoreWriter | None:
    """Ingest's writer for a backend's store, or None when ingest cannot write it."""
    spec = BACKENDS[backend]
    return None if spec.store is None else spec.store(settings, context)


def leaf_entries(entries: Iterable[Any]) -> list[Any]:
    """Every backend entry ``entries`` read: an entry whose backend has legs (a hybrid) stands
    for its legs, in the order the backend declares them; a leg left out is skipped."""
    leaves = []
    for entry in entries:
        legs = BACKENDS[entry.backend].legs
        if not legs:
            leaves.append(entry)
            continue
        for leg in legs:
            nested = getattr(entry.backend_config, leg)
            if nested is not None:
                leaves.append(nested)
    return leaves


def store_locations(entries: Iterable[Any], base_dir: Path) -> list[Path]:
    """The local files or folders an ingest rewrites for the stores ``entries`` read (legs
    included; each backend's ``locations``), each once; remote servers have none."""
    found: list[Path] = []
    for entry in leaf_entries(entries):
        locate = BACKENDS[entry.backend].locations
        if locate is not None:
            found.extend(locate(entry.backend_config, base_dir))
    return list(dict.fromkeys(found))


def evaluable_backends() -> tuple[str, ...]:
    """The backends ``parallel-rag eval`` can index a benchmark collection into."""
    return tuple(name for name, spec in BACKENDS.items() if spec.evaluable)


def term_index_backends() -> tuple[str, ...]:
    """The backends whose retriever keeps a term index the ``prf`` rewriter can read."""
    return tuple(name for name, spec in BACKENDS.items() if spec.term_index)


def collection_writer(backend: str, settings: Any, context: BackendContext) -> SettingsStore:
    """The writer ``parallel-rag eval`` indexes a collection with (``write_collection``);
    ValueError naming the backends that have one for any other."""
    spec = BACKENDS[backend]
    if not spec.evaluable or spec.store is None:
        raise ValueError(
            f"eval indexes collections into {', '.join(evaluable_backends())} retrievers "
            f"only, not {backend!r}"
        )
    return spec.store(settings, context)  # type: ignore[return-value]


def entry_summary(entry: Any) -> dict[str, Any]:
    """What a route preview shows of an entry's backend settings (``BackendSpec.summary``;
    nothing for most backends)."""
    summarize = BACKENDS[entry.backend].summary
    return {} if summarize is None else dict(summarize(entry.backend_config))


def setting_names() -> frozenset[str]:
    """Every field name of every backend's settings (legs included): configuration only, never
    something a run may set."""
    return frozenset(
        name for spec in BACKENDS.values() for name in (*spec.settings.model_fields, *spec.legs)
    )


def named_store(store_id: str, entries: Iterable[Any]) -> tuple[str, dict[str, Any]]:
    """(backend, ``backend_config``) of the store ``parallel-rag ingest --store NAME`` writes,
    by the backend that keeps stores by name (``BackendSpec.named_store``), given the entries
    the configuration has (legs included) to find where its stores live."""
    leaves = leaf_entries(entries)
    for name, spec in BACKENDS.items():
        if spec.named_store is not None:
            configured = [e.backend_config for e in leaves if e.backend == name]
            return name, spec.named_store(store_id, configured)
    raise ValueError("--store: no registered backend keeps stores by name")
