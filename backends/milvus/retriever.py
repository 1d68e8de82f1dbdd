"""Milvus retrieval through ``langchain-milvus``: a Milvus Lite file or a Milvus server, dense
(``search: dense``, the default) or lexical (``search: full_text``).

``uri`` is a local path (Milvus Lite; relative paths start at the config's directory) or a
server URL (``http://host:19530``), with ``token`` for auth. A dense collection uses the COSINE
metric, so scores are cosine similarities and ``similarity_threshold`` drops hits below it.

``search: full_text`` makes the branch lexical with BM25 inside the engine: the collection's
text field is an analyzed ``VARCHAR`` (``analyzer_params``, the engine's ``standard`` analyzer
when unset) and a ``Function(type=BM25)`` (``langchain_milvus.BM25BuiltInFunction``) fills a
``SPARSE_FLOAT_VECTOR`` field (``sparse_field``) indexed with the ``BM25`` metric
(``bm25_k1``/``bm25_b``, fixed when ingest creates the collection). Queries are sent as text;
the engine analyzes them with the same analyzer. Scores are BM25 scores (unbounded, so
``similarity_threshold`` is refused). It is a separate collection from a dense one: ingest
writes both like every store, so one Milvus deployment serves both branches.

Metadata lives either in top-level fields (``metadata_field`` unset: typed or dynamic fields,
what ``langchain-milvus`` writes by default) or in one JSON field (``metadata_field: NAME``).
Request filters become a Milvus boolean expression in that layout (``tenant == "acme"`` or
``metadata["tenant"] == "acme"``), AND-ed with the static ``filter_expression``, which is
validated at load time (both in ``expressions.py``).

Milvus Lite allows one process per file; stores are cached per process so every branch,
request and the ingester share one client, and calls on a local file are serialised. A second
process opening the same file gets ``StoreInUseError`` naming the file. A cached store outlives
a server restart: a collection the restarted server brings back released is loaded again on the
first call it refuses, and pymilvus's own tracebacks of failed calls stay out of the log
(``outages.py``).

The shared stores are opened in ``stores.py``, ingest's writes are in ``writes.py``; this module
holds the two retrievers.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from parallel_rag.backends.base import (
    BuildRequest,
    DenseStoreRetriever,
    MetadataFilter,
    RetrievalKind,
    scored_document,
    settings_factory,
)
from parallel_rag.backends.milvus.expressions import milvus_expression
from parallel_rag.backends.milvus.outages import call_loaded
from parallel_rag.backends.milvus.settings import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_K1,
    DEFAULT_SPARSE_FIELD,
    DEFAULT_URI,
    FULL_TEXT_ONLY,
    MilvusSettings,
    threshold_refusal,
)
from parallel_rag.backends.milvus.stores import check_collection, lock_for, open_store
from pydantic import PrivateAttr

__all__ = [  # the settings, from settings.py, where the configuration schema reads them
    "DEFAULT_BM25_B",
    "DEFAULT_BM25_K1",
    "DEFAULT_SPARSE_FIELD",
    "DEFAULT_URI",
    "FULL_TEXT_ONLY",
    "MilvusSettings",
    "threshold_refusal",
]


class MilvusRetriever(DenseStoreRetriever):
    """Dense retriever over a Milvus collection; usable alone in any LangChain chain."""

    settings: MilvusSettings
    _output_fields: list[str] = PrivateAttr(default_factory=list)

    metric: ClassVar[str] = "COSINE"

    def _guard(self):
        """Calls on a Milvus Lite file are serialised; a server takes them concurrently."""
        if self.settings.is_server:
            return nullcontext()
        return lock_for(self.settings.resolved_uri(self.base_dir))

    def warm_up(self) -> None:
        """Connect now (a Milvus Lite file starts its local server process) and check the
        collection (see ``SearchKwargsRetriever.warm_up``)."""
        self._store()

    def _where(self) -> str:
        """The server URL or the Milvus Lite file, as messages name it."""
        s = self.settings
        return s.uri if s.is_server else s.resolved_uri(self.base_dir)

    def _store(self) -> Any:
        s = self.settings
        store = open_store(s, self.base_dir, self.embedding_model, self.device)
        if not self._output_fields:
            with self._guard():
                if not store.client.has_collection(s.collection):
                    raise LookupError(
                        f"Milvus collection '{s.collection}' does not exist at {self._where()}; "
                        "run `parallel-rag ingest PATH...` first"
                    )
                described = check_collection(s, store.client)
            fields = [  # DataType is an IntEnum: its str() is a number, its name says VECTOR
                f["name"]
                for f in described.get("fields", [])
                if "VECTOR" not in getattr(f["type"], "name", str(f["type"]))
            ]
            if described.get("enable_dynamic_field"):
                fields.append("$meta")
            self._output_fields = fields
        return store

    def _anns_field(self) -> str:
        return self.settings.vector_field

    def _query_data(self, store: Any, query: str) -> Any:
        return store.embeddings.embed_query(query)

    def _score(self, distance: float) -> float:
        return distance

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: MetadataFilter | None = None,
    ) -> list[Document]:
        s = self.settings
        store = self._store()
        data = self._query_data(store, query)
        expression = milvus_expression(filters, s.metadata_field, s.filter_expression)
        with self._guard():
            results = call_loaded(
                store.client,
                s.collection,
                self._where(),
                lambda: store.client.search(
                    s.collection,
                    data=[data],
                    anns_field=self._anns_field(),
                    search_params={"metric_type": self.metric, "params": {}},
                    limit=k or self.k,
                    filter=expression or "",
                    output_fields=self._output_fields,
                ),
            )
        docs = []
        for hit in results[0] if results else []:
            score = self._score(float(hit["distance"]))
            if self.score_threshold is not None and score < self.score_threshold:
                continue
            docs.append(self._to_document({**hit, "distance": score}))
        return docs

    def _to_document(self, hit: dict[str, Any]) -> Document:
        s = self.settings
        entity = dict(hit.get("entity") or {})
        doc_id = hit.get(s.primary_field, hit.get("id", entity.get(s.primary_field)))
        content = entity.pop(s.content_field, None)
        if not isinstance(content, str):
            raise ValueError(f"Milvus hit {doc_id!r} has no text field '{s.content_field}'")
        if s.metadata_field:
            metadata = dict(entity.get(s.metadata_field) or {})
        else:
            for name in (s.primary_field, s.vector_field, "$meta"):
                entity.pop(name, None)
            metadata = entity
        return scored_document(str(doc_id), content, metadata, float(hit["distance"]))


class MilvusFullTextRetriever(MilvusRetriever):
    """Lexical retriever over a Milvus full-text collection (``search: full_text``): the query
    text goes to the engine, which analyzes it and scores BM25 over the sparse field."""

    retrieval_kind: ClassVar[RetrievalKind] = "lexical"
    metric: ClassVar[str] = "BM25"

    def _anns_field(self) -> str:
        return self.settings.sparse

    def query_embedding(self) -> tuple[str, str] | None:
        """None: the engine analyzes the query text, nothing is embedded."""
        return None

    def _query_data(self, store: Any, query: str) -> Any:
        return query

    def _score(self, distance: float) -> float:
        """The BM25 score: Milvus answers it as the distance, Milvus Lite as its negation
        (smaller is better there); a BM25 score is never negative, so both read the same."""
        return abs(distance)


_dense_factory = settings_factory(MilvusRetriever)
_full_text_factory = settings_factory(MilvusFullTextRetriever)


def build_milvus_retriever(request: BuildRequest) -> MilvusRetriever:
    """The dense or the full-text retriever, as ``search`` says."""
    full_text = request.settings.full_text
    return (_full_text_factory if full_text else _dense_factory)(request)
