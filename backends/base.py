"""The contract every parallel-rag backend follows.

A backend is a plain LangChain ``BaseRetriever``: it can be used alone in any LCEL chain. On top
of that, our backends accept per-call ``k`` and ``filters`` keyword arguments (LangChain forwards
``invoke(query, **kwargs)`` to ``_get_relevant_documents``) and return documents that carry a
stable ``id`` and their retrieval score in ``metadata[SCORE_KEY]``. The retrieve node pops the
score out of the metadata into the branch's source record.

Each backend package also declares one ``BackendSpec`` in its ``__init__.py`` (its settings
model, retriever factory, retrieval kind, whether ``similarity_threshold`` applies, and, when
ingest can write it, a ``StoreWriter``), listed in ``registry.py``; the configuration schema,
the factory dispatch and ingestion are derived from those specs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from parallel_rag.backends.encoders.embeddings import BUNDLED, embedding_identity
from pydantic import BaseModel, Field

SCORE_KEY = "retrieval_score"
"""Metadata key under which a backend reports a document's retrieval score."""

RetrievalKind = Literal["lexical", "dense"]
"""Lexical branches never receive HyDE views; dense ones do."""

MetadataFilter = Mapping[str, str | int | float | bool]
"""Flat metadata equality filter: every key must equal its value."""


class StoreInUseError(RuntimeError):
    """An embedded store (Qdrant local mode, Milvus Lite) is locked by another process; the
    message names the path and what to do instead."""

    def __init__(self, store: str, path: str, server: str):
        self.store = store
        self.path = path
        super().__init__(
            f"{store} at {path} is in use by another process: an embedded store allows one "
            f"process per path. Stop the other process (a server or an ingest), give each "
            f"process its own copy of the folder, or use a {server} server."
        )


def matches_filter(metadata: Mapping[str, Any], filters: MetadataFilter | None) -> bool:
    """True when every filter key is present in ``metadata`` with an equal value."""
    if not filters:
        return True
    return all(key in metadata and metadata[key] == value for key, value in filters.items())


def contradicts(metadata: Mapping[str, Any], filters: MetadataFilter | None) -> bool:
    """True when the hit's metadata names a filtered key with another value: the last line of
    defence of a backend whose service applied the filters itself (a hit that omits the key
    is kept; one that contradicts it is dropped)."""
    return any(key in metadata and metadata[key] != value for key, value in (filters or {}).items())


def retrieval_kind_of(retriever: Any) -> RetrievalKind:
    """Kind of a retriever; foreign ones count as lexical unless vector-store backed."""
    declared = getattr(retriever, "retrieval_kind", None)
    if declared in ("lexical", "dense"):
        return declared
    if hasattr(retriever, "vectorstore"):
        return "dense"
    return "lexical"


def term_index_of(retriever: Any) -> Callable[[], Any] | None:
    """The accessor of the term index a retriever searches (its ``term_index``: the index the
    ``prf`` rewriter expands queries from; ``BackendSpec.term_index`` backends have one), or
    None."""
    accessor = getattr(retriever, "term_index", None)
    return accessor if callable(accessor) else None


def scored_document(
    doc_id: str, content: str, metadata: Mapping[str, Any], score: float
) -> Document:
    """A result document in the backend contract: stable id, score in metadata."""
    return Document(id=doc_id, page_content=content, metadata={**metadata, SCORE_KEY: float(score)})


def query_embedding(retriever: Any) -> tuple[str, str] | None:
    """(embedding model, device) a retriever embeds its query text with through the shared
    ``load_embeddings`` model, as the retriever says (``SearchKwargsRetriever.query_embedding``);
    None for lexical and foreign retrievers."""
    says = getattr(retriever, "query_embedding", None)
    return says() if callable(says) else None


def supports_search_kwargs(retriever: Any) -> bool:
    """Our backends take ``k``/``filters`` per call; foreign retrievers are post-filtered."""
    return bool(getattr(retriever, "accepts_search_kwargs", False))


class SearchKwargsRetriever(BaseRetriever):
    """Base for our backends: per-call ``k``/``filters`` reach the sync search on both paths
    (LangChain's default async path would drop them), run off the event loop."""

    accepts_search_kwargs: ClassVar[bool] = True

    def query_embedding(self) -> tuple[str, str] | None:
        """(embedding model, device) this retriever embeds its query with through the shared
        ``load_embeddings`` model (so the graph can start that encode early), or None."""
        return None

    def warm_up(self) -> None:
        """Open what this retriever's first search would otherwise open: an index read into
        memory, a collection's files, a client. A store of a million chunks takes tens of
        seconds to read, longer than a branch's timeout: servers call this (through
        ``RAGGraphs.warm_up``) before they accept traffic, so the first request does not
        pay it. Raises what that first search would (no index yet); nothing to open: no-op."""

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        **kwargs: Any,
    ) -> list[Document]:
        return await run_in_executor(
            None,
            self._get_relevant_documents,
            query,
            run_manager=run_manager.get_sync(),
            **kwargs,
        )


def warm_up_each(retrievers: Sequence[tuple[str, Any]]) -> dict[str, Exception]:
    """Call ``warm_up`` of every (name, retriever) that has one, each whatever the others
    raise; returns {name: error} of those that failed (a retriever without ``warm_up``, or
    None, is skipped)."""
    failed: dict[str, Exception] = {}
    for name, retriever in retrievers:
        opener = getattr(retriever, "warm_up", None)
        if opener is None:
            continue
        try:
            opener()
        except Exception as error:  # noqa: BLE001 - the caller decides what a failure means
            failed[name] = error
    return failed


class DenseStoreRetriever(SearchKwargsRetriever):
    """Base for dense retrievers over a store: the fields ``settings_factory`` fills besides the
    subclass's ``settings`` (the config's directory, hits per call, similarity threshold and
    the embedding model queries are embedded with)."""

    retrieval_kind: ClassVar[RetrievalKind] = "dense"

    base_dir: Path | None = None
    k: int = Field(default=10, gt=0)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    embedding_model: str = BUNDLED
    device: str = "cpu"

    def query_embedding(self) -> tuple[str, str] | None:
        return (self.embedding_model, self.device)

    def check_built_with(self, built_with: Any, store: str) -> None:
        """Refuse to search ``store`` (named for the message) when its vectors came from
        another model than the one the query is embedded with (``built_with``: the identity
        its manifest records)."""
        identity = embedding_identity(self.embedding_model)
        if built_with != identity:
            raise ValueError(
                f"{store} was built with {built_with}, the pipeline embeds with {identity}"
            )


# ------------------------------------------------------------------------------ registry entries

DEFAULT_K = 10
"""Hits a backend returns when its entry sets no ``top_k``."""

Fingerprint = tuple[str, str, str | None]
"""(chunk id, file id, ``chunk_hash``): one chunk as a store holds it. Ingest compares a store's
fingerprints with the fresh chunks' to leave files whose chunks are unchanged alone."""


class SettingError(ValueError):
    """A backend setting that validated but cannot be used when the retriever is built (an API
    key in neither the config nor the environment); ``field`` names it inside ``backend_config``
    and the graph reports it as a configuration error naming the entry."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def resolve_path(path: str | Path, base_dir: Path | None) -> Path:
    """``path`` with ``~`` expanded; a relative path starts at ``base_dir`` (the directory of
    the config file) and comes back absolute."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute() or base_dir is None:
        return candidate
    return (base_dir / candidate).resolve()


@runtime_checkable
class SentenceSource(Protocol):
    """The generator's sentences, as ingest hands them to a store that indexes sentences
    (Qdrant Edge's sentence shard): the store must cut a chunk exactly as the extractive
    generator does, and that splitter lives with the generator (``nodes/generate``), which a
    backend does not import."""

    def split(self, text: str) -> list[str]:
        """The sentences of one chunk."""

    def embeddings(self) -> Embeddings:
        """The model sentences are embedded with (reading vectors ingest stored first)."""


@dataclass(frozen=True)
class BackendContext:
    """What every backend of one configuration shares: where relative paths start, the
    embedding model dense backends embed queries and chunks with, and, when ingest or an
    evaluation writes, the generator's sentences (``SentenceSource``; None when searching):
    a store that indexes sentences cuts and embeds them through it."""

    base_dir: Path
    embedding_model: str
    device: str
    sentences: SentenceSource | None = None


@dataclass(frozen=True)
class BuildRequest:
    """What a backend's factory receives: its validated retriever entry (``name``, ``top_k``,
    ``similarity_threshold``, ``timeout_seconds``, ``backend_config``), the shared context, and
    ``build``, which turns a nested entry (a hybrid's legs) into its retriever through the
    registry, so a backend never imports another backend's factory."""

    entry: Any
    context: BackendContext
    build: Callable[[Any], BaseRetriever]
    pipeline: Any = None
    """The whole validated configuration, for a backend that reads a top-level section."""

    @property
    def settings(self) -> Any:
        """The entry's ``backend_config``, validated by the backend's settings model."""
        return self.entry.backend_config

    @property
    def k(self) -> int:
        return self.entry.top_k or DEFAULT_K

    def standard_args(self) -> dict[str, Any]:
        """The constructor arguments our retrievers share, by their field names."""
        return {
            "settings": self.settings,
            "base_dir": self.context.base_dir,
            "k": self.k,
            "score_threshold": self.entry.similarity_threshold,
            "embedding_model": self.context.embedding_model,
            "device": self.context.device,
        }


def settings_factory(retriever: type[BaseRetriever]) -> Callable[[BuildRequest], BaseRetriever]:
    """The factory of a retriever class that takes (some of) ``BuildRequest.standard_args``:
    each argument the class declares as a field is passed, the others are not."""

    def build(request: BuildRequest) -> BaseRetriever:
        fields = retriever.model_fields
        return retriever(**{k: v for k, v in request.standard_args().items() if k in fields})

    return build


@dataclass(frozen=True)
class ChunkBatch:
    """Chunks to write into a store, as columns; ``vectors`` only for stores that embed."""

    ids: Sequence[str]
    texts: Sequence[str]
    metadatas: Sequence[dict[str, Any]]
    vectors: Sequence[Sequence[float]] | None = None

    def columns(self) -> dict[str, Any]:
        return {
            "ids": self.ids,
            "texts": self.texts,
            "metadatas": self.metadatas,
            "vectors": self.vectors,
        }

    def part(self, start: int, stop: int) -> ChunkBatch:
        """Chunks ``start`` to ``stop`` (a store writing in batches turns a million chunks
        into points a batch at a time, never all at once)."""
        return ChunkBatch(
            ids=self.ids[start:stop],
            texts=self.texts[start:stop],
            metadatas=self.metadatas[start:stop],
            vectors=None if self.vectors is None else self.vectors[start:stop],
        )


@runtime_checkable
class StoreWriter(Protocol):
    """What ingest needs from a store it writes (one per configured store, built by the
    backend's ``BackendSpec.store`` from its settings and the context).

    Ingest calls ``open`` on every store before anything is written (so a store another process
    holds, or a missing model, fails the run while every store is intact), then
    ``fingerprints`` to find the files whose chunks changed, then ``write`` once per store with
    only those files' chunks.
    """

    needs_vectors: bool
    """Whether ``write`` needs the chunks' embeddings (``ChunkBatch.vectors``)."""

    def open(self) -> None:
        """Take the store's process lock, or repair a write a killed process left halfway."""

    def fingerprints(self, file_ids: Sequence[str]) -> set[Fingerprint] | None:
        """What the store holds for ``file_ids``; None when nothing stored is usable (no
        store yet, or one built with other parameters), so every file is written."""

    def write(self, batch: ChunkBatch, replace_file_ids: Sequence[str]) -> None:
        """Delete every chunk of ``replace_file_ids``, then add the batch (an empty batch
        only deletes). A store killed halfway converges when the same write runs again."""


@dataclass
class SettingsStore:
    """Base of a ``StoreWriter``: the backend's validated settings and the shared context."""

    settings: Any
    context: BackendContext
    needs_vectors: ClassVar[bool] = True

    def write_collection(self, batch: ChunkBatch) -> None:
        """Write a whole evaluation collection (``parallel-rag eval``'s corpus, one chunk per
        document, stable ids): a write that replaces no file, so a chunk written again under
        the same id is overwritten. A store that cannot keep chunks apart that way rebuilds
        itself from ``batch`` alone instead."""
        self.write(batch, [])


RetrievalKindRule = RetrievalKind | Callable[[Any], RetrievalKind]
"""A fixed kind, or a function of the validated settings."""


@dataclass(frozen=True)
class BackendSpec:
    """One registry entry: everything the rest of parallel-rag needs to know about a backend.

    ``name`` is the value of ``backend:`` in a retriever entry and ``settings`` the model of its
    ``backend_config`` (optional in the config when every field has a default). ``factory``
    builds the retriever from a ``BuildRequest``. ``kind`` says which query views it takes
    (dense ones also get HyDE passages). ``threshold_refusal`` says whether
    ``similarity_threshold`` applies: None when it does, a text when it never does (why not),
    or a function of the settings returning None or why not. ``store`` builds ingest's writer
    from (settings, context) when ingest can write the backend's store. ``legs`` names the
    settings fields that hold nested retriever entries (leg name: required?), as a hybrid's
    primary and fallback; a backend with legs cannot be a leg.

    ``locations`` gives, from (settings, the config's directory), the local files or folders
    a write to its store changes (none for a remote server): what a cache of its results
    watches to expire when an ingest rewrites the store. ``evaluable`` says ``parallel-rag
    eval`` can index a benchmark collection into it (it needs a ``store`` with
    ``write_collection``). ``summary`` gives, from the settings, what a route preview shows of
    them besides the entry's own fields (a hybrid: its legs' names and strategy). ``check``
    looks at the settings against the whole validated configuration when it loads (an ``mcp``
    entry's server must be declared under ``mcp_servers``): it raises ``SettingError`` naming
    the field, and the configuration reports it under the entry. ``named_store`` marks the
    backend whose stores ``parallel-rag ingest --store NAME`` creates by name: from (NAME, the
    settings of its entries the configuration already has) it gives the ``backend_config`` of
    the store to write. ``term_index`` says its retriever keeps a term index (``term_index()``,
    a ``BM25Index``) that the ``prf`` rewriter can expand queries from. ``extra`` names the
    extra of ``parallel-rag`` that brings the packages it needs (``extras.EXTRAS``), for a
    backend outside the core: a configuration naming it without that extra installed is
    refused at load with the extra to install.

    The spec lives in the backend package's ``__init__.py`` beside its settings model
    (``settings.py``: pydantic and the standard library); ``factory`` and ``store`` are small
    functions that import the backend's ``retriever.py`` when called, so registering a backend
    imports none of its client libraries: a graph loads those of the backends it builds.
    """

    name: str
    settings: type[BaseModel]
    factory: Callable[[BuildRequest], BaseRetriever]
    kind: RetrievalKindRule
    threshold_refusal: str | Callable[[Any], str | None] | None = None
    store: Callable[[Any, BackendContext], StoreWriter] | None = None
    legs: Mapping[str, bool] = field(default_factory=dict)
    locations: Callable[[Any, Path], Sequence[Path]] | None = None
    evaluable: bool = False
    summary: Callable[[Any], Mapping[str, Any]] | None = None
    check: Callable[[Any, Any], object] | None = None
    named_store: Callable[[str, Sequence[Any]], dict[str, Any]] | None = None
    term_index: bool = False
    extra: str | None = None

    def kind_of(self, settings: Any) -> RetrievalKind:
        return self.kind if isinstance(self.kind, str) else self.kind(settings)
