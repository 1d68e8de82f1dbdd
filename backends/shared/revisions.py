"""Stores published as whole revisions: the managed vector store and Qdrant Edge keep each
write as a complete ``rev-*`` directory beside the live one and name the live one in a
``CURRENT`` file, so a reader never sees a half-written store.

A writer takes the store's file lock (``write_lock``, which also removes the staging
directories a writer killed halfway left), builds the next revision (``new_revision``) and
publishes it (``publish``: the directory through ``atomic_files.write_directory``, then
``CURRENT``), keeping the previous revision for readers still loading it and dropping older
ones. Readers ask ``LiveRevisions`` for the live revision: opened once per process and opened
again when ``CURRENT`` names a new one.

Within one run of a graph, every search of a store gets the revision live when the run
started (``hold_stores_for_run`` takes it then, for each branch's retriever and each leg of a
hybrid branch; ``held_for_run`` gives it back): a run whose rewriting, query views, branches or
fallback legs straddle an ingest still reads one revision of each store, whole. The BM25
retriever keeps its loaded index the same way. A graph's entry opens its run's holds under the
run's key (``open_run``; the graph uses LangGraph's per-run ``RunControl``, which every task of
the run and of a graph run inside it shares), each node that searches reads them
(``within_run``) and the last one closes them (``close_run``); ``run_scope`` opens holds for
the code inside it, whatever runs there.
"""

from __future__ import annotations

import contextvars
import fcntl
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from parallel_rag.backends.shared.atomic_files import STAGING_MARK, write_directory, write_file

CURRENT_FILE = "CURRENT"
REVISION_PREFIX = "rev-"
LOCK_FILE = ".lock"

T = TypeVar("T")
logger = logging.getLogger(__name__)


_RUN_HOLDS: contextvars.ContextVar[dict[Any, Any] | None] = contextvars.ContextVar(
    "parallel_rag_run_holds", default=None
)
"""What the current run holds of each store, by key; None outside a run. The dict is shared by
the contexts LangGraph copies for the run's branches (threads and tasks alike)."""


@contextmanager
def run_scope() -> Iterator[None]:
    """One run of a graph: inside it, ``held_for_run`` answers each key with what the run got
    first. A scope inside a scope (a graph run by a node of another) is the outer one."""
    if _RUN_HOLDS.get() is not None:
        yield
        return
    token = _RUN_HOLDS.set({})
    try:
        yield
    finally:
        try:
            _RUN_HOLDS.reset(token)
        except ValueError:  # a stream closed from another context: leave that one clean
            _RUN_HOLDS.set(None)


RUN_HOLD_SECONDS = 900.0
"""How long the holds of a run that never closed (it failed before its last node) are kept:
the next run to open drops them after that."""


@dataclass
class _Run:
    holds: dict[Any, Any] = field(default_factory=dict)
    users: int = 1
    since: float = field(default_factory=time.monotonic)


_RUNS: dict[Hashable, _Run] = {}
_RUNS_LOCK = threading.Lock()


def open_run(key: Hashable) -> None:
    """A graph run starts under ``key``: from now until ``close_run(key)``, code inside
    ``within_run(key)`` reads the stores' revisions the run got first. A key already open (a
    graph run inside a node of another run, under the same key) is opened once more and keeps
    what the outer run holds. Runs left open longer than ``RUN_HOLD_SECONDS`` are dropped."""
    now = time.monotonic()
    with _RUNS_LOCK:
        for stale in [k for k, run in _RUNS.items() if now - run.since > RUN_HOLD_SECONDS]:
            del _RUNS[stale]
        run = _RUNS.get(key)
        if run is None:
            _RUNS[key] = _Run()
        else:
            run.users += 1


def close_run(key: Hashable) -> None:
    """The run under ``key`` searches no store any more: its holds go when every opening of the
    key is closed."""
    with _RUNS_LOCK:
        run = _RUNS.get(key)
        if run is not None:
            run.users -= 1
            if run.users <= 0:
                del _RUNS[key]


def runs_open() -> int:
    """How many runs hold revisions now (0 when no graph is running)."""
    return len(_RUNS)


@contextmanager
def within_run(key: Hashable) -> Iterator[None]:
    """Inside: ``held_for_run`` answers from the run open under ``key`` (as ``run_scope``
    does); a ``run_scope`` around it wins, and a key no run has open changes nothing."""
    run = _RUNS.get(key) if _RUN_HOLDS.get() is None else None
    if run is None:
        yield
        return
    token = _RUN_HOLDS.set(run.holds)
    try:
        yield
    finally:
        _RUN_HOLDS.reset(token)


class _OpenFailed:
    """A store the run could not open: its searches in the run raise the same error."""

    def __init__(self, error: Exception):
        self.error = error


def held_for_run(key: Any, open_live: Callable[[], T]) -> T:
    """``open_live()`` (a store's live revision or loaded index), kept for the rest of the
    current run under ``key``: the run's later searches of the store get the same one, even
    after an ingest published another; a store the run could not open raises the same error
    for each of them (it is not read again). Outside a run, always ``open_live()``. Two
    branches opening it at once may each open one; both get the first one kept."""
    holds = _RUN_HOLDS.get()
    if holds is None:
        return open_live()
    held = holds.get(key)
    if held is None:
        try:
            opened: Any = open_live()
        except Exception as error:  # noqa: BLE001 - kept and raised to each search of the run
            opened = _OpenFailed(error)
        held = holds.setdefault(key, opened)
    if isinstance(held, _OpenFailed):
        raise held.error
    return held


def hold_stores_for_run(retrievers: Iterable[Any]) -> None:
    """A run's start (inside ``run_scope``): each retriever that reads a published revision or
    a loaded index (``reads_revisions``) takes the one live now (its ``warm_up``: a ``stat``
    or a read of ``CURRENT`` when nothing changed), so every search of the run, however late,
    reads what was live when the run started. A retriever that runs others (``legs()``: a
    hybrid's primary and fallback) has each of its legs held the same way, the fallback too
    though it may search last or never; a leg that reads no revision (a remote API) is not
    called. One that cannot open its store (nothing ingested yet) is left to fail in its
    branch, as it would have."""
    for retriever in retrievers:
        legs = getattr(retriever, "legs", None)
        if callable(legs):
            hold_stores_for_run(legs().values())
        if getattr(retriever, "reads_revisions", False):
            try:
                retriever.warm_up()
            except Exception as error:  # noqa: BLE001 - the branch reports it
                logger.debug("could not hold %r for the run: %s", retriever, error)


def current_revision(directory: Path) -> str | None:
    """The live revision's directory name, or None when nothing was published yet."""
    try:
        return (directory / CURRENT_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def current_file_of(settings: Any, base_dir: Path) -> list[Path]:
    """The ``locations`` (``BackendSpec``) of a revision store whose settings give its folder
    (``store_dir``): its ``CURRENT`` file, which every write replaces last."""
    return [settings.store_dir(base_dir) / CURRENT_FILE]


def new_revision() -> str:
    """A fresh revision name: later ones sort after earlier ones, and two writers never clash."""
    return f"{REVISION_PREFIX}{time.time_ns()}-{uuid.uuid4().hex[:8]}"


@contextmanager
def write_lock(directory: Path) -> Iterator[None]:
    """Hold the store's exclusive file lock (one writer at a time, across processes; readers
    never take it). Inside it, the staging directories a writer killed halfway left are gone."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_FILE, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            for stale in directory.glob(f".{REVISION_PREFIX}*{STAGING_MARK}*"):
                shutil.rmtree(stale, ignore_errors=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def publish(
    directory: Path, revision: str, fill: Callable[[Path], None], previous: str | None
) -> None:
    """Write revision ``revision`` with ``fill`` and make it the live one, then drop every
    revision but it and ``previous`` (readers may still be loading that one). Call it under
    ``write_lock``."""
    write_directory(directory / revision, fill)
    write_file(directory / CURRENT_FILE, revision)
    for child in directory.iterdir():
        if (
            child.is_dir()
            and child.name.startswith(REVISION_PREFIX)
            and child.name not in {revision, previous}
        ):
            shutil.rmtree(child, ignore_errors=True)


class LiveRevisions(Generic[T]):
    """Each store's live revision as ``load(directory, revision)`` opened it, held per process
    and opened again when ``CURRENT`` names a new one. A store is opened by one thread at a
    time (another asking for it waits and gets the same object); stores already held answer
    meanwhile. A store with nothing published raises ``LookupError`` with ``missing(directory)``.
    """

    def __init__(self, load: Callable[[Path, str], T], missing: Callable[[Path], str]):
        self._load = load
        self._missing = missing
        self._held: dict[Path, tuple[str, T]] = {}
        self._opening: dict[Path, threading.Lock] = {}
        self._lock = threading.Lock()

    def _current(self, directory: Path, revision: str) -> T | None:
        held = self._held.get(directory)
        return held[1] if held is not None and held[0] == revision else None

    def get(self, directory: Path) -> T:
        """The live revision of ``directory``; inside a run (``run_scope``), the one the run
        got first."""
        return held_for_run((id(self), directory), lambda: self._live(directory))

    def _live(self, directory: Path) -> T:
        revision = current_revision(directory)
        if revision is None:
            raise LookupError(self._missing(directory))
        with self._lock:
            held = self._current(directory, revision)
            if held is not None:
                return held
            opening = self._opening.setdefault(directory, threading.Lock())
        with opening:
            with self._lock:
                held = self._current(directory, revision)
            if held is None:
                held = self._load(directory, revision)
                with self._lock:
                    self._held[directory] = (revision, held)
            return held

    def __len__(self) -> int:
        """How many stores are held open."""
        return len(self._held)

    def clear(self) -> None:
        """Forget every held revision (the next ``get`` opens it again)."""
        with self._lock:
            self._held.clear()
