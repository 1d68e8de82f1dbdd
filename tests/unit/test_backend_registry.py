"""The backend registry: every registered backend declares a settings model, a factory and a
retrieval kind, and, when ingest can write it, a store writer that implements the one declared
``StoreWriter`` protocol. The configuration schema is derived from the same registry."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from parallel_rag.backends.base import (
    BackendContext,
    BackendSpec,
    ChunkBatch,
    SettingsStore,
    StoreWriter,
    query_embedding,
)
from parallel_rag.backends.registry import (
    BACKENDS,
    REFUSED,
    collection_writer,
    entry_summary,
    evaluable_backends,
    leaf_entries,
    named_store,
    setting_names,
    store_locations,
)
from parallel_rag.graph.configuration import ENTRY_MODELS, NESTED_BACKENDS
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.ingestion import ingest_paths
from pydantic import BaseModel

WRITABLE = sorted(name for name, spec in BACKENDS.items() if spec.store is not None)
PROTOCOL_METHODS = ("open", "fingerprints", "write")


def context(tmp_path: Path) -> BackendContext:
    return BackendContext(tmp_path, "bundled", "cpu")


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_backend_has_settings_a_factory_and_a_kind(name):
    spec = BACKENDS[name]
    assert isinstance(spec, BackendSpec) and spec.name == name
    assert issubclass(spec.settings, BaseModel)
    assert callable(spec.factory)
    assert spec.kind in ("lexical", "dense") or callable(spec.kind)
    refusal = spec.threshold_refusal
    assert refusal is None or callable(refusal) or (isinstance(refusal, str) and refusal)
    for leg in spec.legs:
        assert leg not in spec.settings.model_fields  # legs are added by the configuration


@pytest.mark.parametrize("name", WRITABLE)
def test_writable_backends_have_a_store_writer_that_implements_the_protocol(name, tmp_path):
    spec = BACKENDS[name]
    writer = spec.store(spec.settings.model_construct(), context(tmp_path))
    assert isinstance(writer, StoreWriter)
    assert isinstance(writer.needs_vectors, bool)
    for method in PROTOCOL_METHODS:
        declared = inspect.signature(getattr(StoreWriter, method))
        implemented = inspect.signature(getattr(type(writer), method))
        assert list(implemented.parameters) == list(declared.parameters), method


def test_the_writable_backends_are_the_stores_ingest_writes():
    assert WRITABLE == ["bm25", "milvus", "qdrant", "qdrant_edge", "vectorstore"]


def test_the_configuration_schema_is_derived_from_the_registry():
    assert set(ENTRY_MODELS) == set(BACKENDS)
    for name, model in ENTRY_MODELS.items():
        assert model.spec is BACKENDS[name]
        settings = model.model_fields["backend_config"].annotation
        assert issubclass(settings, BACKENDS[name].settings)
        assert set(BACKENDS[name].legs) <= set(settings.model_fields)
    legs = {name for name, spec in BACKENDS.items() if not spec.legs}
    assert NESTED_BACKENDS == legs | set(REFUSED)
    assert not set(REFUSED) & set(BACKENDS)


def test_the_entry_kind_follows_the_registered_rule():
    lexical = {"endpoint": "http://e/i/_search", "request_format": "elasticsearch"}
    config = parse_config(
        {
            "retrievers": [
                {"backend": "bm25"},
                {"backend": "qdrant"},
                {"backend": "external_api", "backend_config": lexical},
                {"backend": "hybrid", "backend_config": {"primary": {"backend": "qdrant"}}},
            ]
        }
    )
    assert [e.retrieval_kind for e in config.retrievers] == ["lexical", "dense", "lexical", "dense"]


def chunk_batch(writer: StoreWriter, *ids: str, file_id: str) -> ChunkBatch:
    metadatas = [{"file_id": file_id, "chunk_hash": f"h-{i}"} for i in ids]
    vectors = [[1.0, float(n)] for n, _ in enumerate(ids)] if writer.needs_vectors else None
    return ChunkBatch(list(ids), [f"text of {i}" for i in ids], metadatas, vectors)


@pytest.mark.parametrize(
    ("name", "backend_config"), [("bm25", {}), ("vectorstore", {"vector_store_id": "kb"})]
)
def test_a_store_writer_replaces_a_files_chunks_and_reports_what_it_holds(
    name, backend_config, tmp_path
):
    spec = BACKENDS[name]
    writer = spec.store(spec.settings.model_validate(backend_config), context(tmp_path))
    writer.open()
    assert writer.fingerprints(["a"]) in (None, set())  # nothing stored yet
    writer.write(chunk_batch(writer, "a1", "a2", file_id="a"), ["a"])
    writer.write(chunk_batch(writer, "b1", file_id="b"), ["b"])
    assert writer.fingerprints(["a", "b"]) == {
        ("a1", "a", "h-a1"),
        ("a2", "a", "h-a2"),
        ("b1", "b", "h-b1"),
    }
    writer.write(chunk_batch(writer, "a3", file_id="a"), ["a"])  # a file's chunks, replaced whole
    assert writer.fingerprints(["a"]) == {("a3", "a", "h-a3")}
    writer.write(chunk_batch(writer, file_id="b"), ["b"])  # an empty batch only deletes
    assert writer.fingerprints(["a", "b"]) == {("a3", "a", "h-a3")}


def test_ingest_writes_every_registered_store_a_config_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.md").write_text("# A\nAda Lovelace wrote the first program.\n")
    config = parse_config(
        {
            "retrievers": [
                {"backend": "bm25"},
                {
                    "backend": "external_api",
                    "backend_config": {
                        "endpoint": "http://e/i/_search",
                        "request_format": "elasticsearch",
                    },
                },
            ]
        }
    )
    report = ingest_paths([tmp_path / "a.md"], config, tmp_path, progress=False)
    assert report.indexes == ["bm25 (bm25)"] and report.embedded == 0
    again = ingest_paths([tmp_path / "a.md"], config, tmp_path, progress=False)
    assert again.unchanged == ["bm25 (bm25)"]


# -- what a backend declares for the rest: store locations, evaluability, setting names, legs


class NotesSettings(BaseModel):
    folder: str = "notes"


class NotesStore(SettingsStore):
    """A store of one JSON file: enough to be written, watched and evaluated."""

    needs_vectors = False

    def open(self) -> None:
        pass

    def fingerprints(self, file_ids):
        return None

    def write(self, batch, replace_file_ids):
        path = self.context.base_dir / self.settings.folder / "notes.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(list(batch.texts)))


NOTES = BackendSpec(
    name="notes",
    settings=NotesSettings,
    factory=lambda request: None,
    kind="lexical",
    store=NotesStore,
    locations=lambda settings, base_dir: [base_dir / settings.folder / "notes.json"],
    evaluable=True,
)


def entry(backend: str, name: str = "e", **settings) -> SimpleNamespace:
    """A retriever entry as the configuration validates it (a backend with legs gets them as
    the configuration adds them: attributes beside its own settings)."""
    spec = BACKENDS[backend]
    config = SimpleNamespace(**settings) if spec.legs else spec.settings(**settings)
    return SimpleNamespace(name=name, backend=backend, backend_config=config)


@pytest.fixture()
def notes_registered(monkeypatch):
    monkeypatch.setitem(BACKENDS, "notes", NOTES)


def test_a_new_backends_store_locations_are_watched_legs_included(notes_registered, tmp_path):
    notes = entry("notes", "n", folder="kb")
    hybrid = entry("hybrid", "h", primary=notes, fallback=None, strategy="sequential")
    watched = tmp_path / "kb" / "notes.json"
    assert store_locations([notes], tmp_path) == [watched]
    assert store_locations([hybrid, notes], tmp_path) == [watched]  # each once
    assert leaf_entries([hybrid]) == [notes]
    assert entry_summary(hybrid) == {"primary": "n", "fallback": None, "strategy": "sequential"}
    assert entry_summary(notes) == {}


def test_a_new_evaluable_backend_gets_a_collection_writer(notes_registered, tmp_path):
    assert "notes" in evaluable_backends()
    writer = collection_writer("notes", NotesSettings(), context(tmp_path))
    writer.write_collection(ChunkBatch(ids=["1"], texts=["Ada"], metadatas=[{}]))
    (written,) = store_locations([entry("notes")], tmp_path)
    assert json.loads(written.read_text()) == ["Ada"]
    with pytest.raises(ValueError, match="into bm25, qdrant, qdrant_edge, notes retrievers only"):
        collection_writer("milvus", None, context(tmp_path))


def test_a_new_backends_setting_names_are_never_per_run_settings(notes_registered):
    assert "folder" in setting_names()
    assert {"primary", "fallback", "index_path", "vector_store_id", "endpoint"} <= setting_names()


def test_the_shipped_backends_declare_their_local_store_files(tmp_path):
    found = store_locations(
        [
            entry("bm25", index_path="idx"),
            entry("qdrant", path="q", collection="docs"),
            entry("qdrant", url="http://q:6333"),  # a server: expires by TTL only
            entry("milvus", uri="m.db", collection="docs"),
            entry("milvus", uri="http://m:19530", collection="docs"),
            entry("qdrant_edge", path="edge", collection="docs"),
            entry("vectorstore", vector_store_id="kb"),
            entry("external_api", endpoint="http://e/_search", request_format="elasticsearch"),
        ],
        tmp_path,
    )
    assert found == [
        tmp_path / "idx",
        tmp_path / "q" / "collection" / "docs",
        tmp_path / "m.db",
        tmp_path / "edge" / "docs" / "CURRENT",
        tmp_path / ".parallel-rag" / "vector_stores" / "kb" / "CURRENT",
    ]
    assert evaluable_backends() == ("bm25", "qdrant", "qdrant_edge")


def test_bm25_evaluation_indexes_the_collection_alone(tmp_path):
    settings = BACKENDS["bm25"].settings()
    writer = BACKENDS["bm25"].store(settings, context(tmp_path))
    writer.write(chunk_batch(writer, "old", file_id="a"), ["a"])
    collection_writer("bm25", settings, context(tmp_path)).write_collection(
        ChunkBatch(ids=["d1"], texts=["Ada Lovelace"], metadatas=[{"source": "d1"}])
    )
    assert writer.fingerprints(["a"]) == set()  # the earlier chunks are gone


def test_a_hybrid_embeds_its_query_as_its_primary_does(tmp_path):
    from parallel_rag.backends.bm25.retriever import BM25Retriever
    from parallel_rag.backends.hybrid.retriever import HybridRetriever
    from parallel_rag.backends.vectorstore.retriever import (
        VectorStoreRetriever,
        VectorStoreSettings,
    )

    dense = VectorStoreRetriever(
        settings=VectorStoreSettings(vector_store_id="kb"), embedding_model="m", device="cpu"
    )
    lexical = BM25Retriever(index_path=str(tmp_path / "idx"))
    assert query_embedding(dense) == ("m", "cpu")
    assert query_embedding(lexical) is None
    assert query_embedding(object()) is None  # a foreign retriever
    assert query_embedding(HybridRetriever(primary=dense, fallback=lexical)) == ("m", "cpu")
    assert query_embedding(HybridRetriever(primary=lexical, fallback=dense)) is None


@pytest.mark.parametrize("name", sorted(setting_names()))
def test_no_backend_setting_can_be_set_per_run(name):
    from parallel_rag.graph.context import KnobError, knobs_from

    with pytest.raises(KnobError, match=f"configurable.{name}: not a per-run setting"):
        knobs_from(None, {name: "x"})


def test_ingest_store_names_a_managed_vector_store_where_the_config_keeps_them():
    kept = entry("vectorstore", "kb", vector_store_id="kb", root="stores")
    hybrid = entry("hybrid", "h", primary=kept, fallback=None, strategy="sequential")
    assert named_store("notes", [entry("bm25"), hybrid]) == (
        "vectorstore",
        {"vector_store_id": "notes", "root": "stores"},
    )
    assert named_store("notes", [entry("bm25")]) == (
        "vectorstore",
        {"vector_store_id": "notes", "root": ".parallel-rag/vector_stores"},
    )
