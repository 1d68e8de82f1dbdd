"""Dense over passages (``qdrant_edge`` with ``passages:``): a long document whose answer sits
past what the model reads is found through a later passage and comes back whole, once; deletes
remove every passage; filters and ``k`` count documents, not passages. Real parts: the packaged
MiniLM, ingest's code path, the embedded Qdrant Edge store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from parallel_rag.backends.base import BackendContext
from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings
from parallel_rag.backends.qdrant_edge.points import passage_splitter
from parallel_rag.backends.qdrant_edge.retriever import (
    PassageSettings,
    QdrantEdgeSettings,
    QdrantEdgeStore,
)
from parallel_rag.backends.qdrant_edge.search import open_revision
from parallel_rag.backends.qdrant_edge.writes import write_chunks
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.studio.ingestion import ingest_paths
from qdrant_edge import FieldCondition, Filter, MatchValue, ScrollRequest

pytestmark = pytest.mark.integration
EdgeEntry = ENTRY_MODELS["qdrant_edge"]

FILLER = (
    "The guild ledger of the river town records wool tolls, bridge repairs, grain prices "
    "and the wages paid to masons during the long winter. Clerks copied each account twice "
    "and the aldermen audited the copies every quarter before the spring fair. "
)
ANSWER = "The lighthouse keeper of Zorvath feeds saffron to forty albino ravens every solstice."
PASSAGES = {"max_tokens": 64, "stride": 32}  # short passages: the answer is most of one
QUESTION = "Who feeds saffron to albino ravens at the solstice?"
LONG_TITLE = "Annals of the river guild"
LONG_TEXT = FILLER * 8 + ANSWER
OTHERS = [
    ("birds", "Crows and magpies are clever birds that can use simple tools."),
    ("spice", "Cinnamon comes from the inner bark of tropical trees."),
    ("lamp", "A lighthouse guides ships at night with a rotating lamp and a lens."),
    ("solstice", "The winter solstice is the shortest day of the year in the north."),
]


def write_corpus(folder: Path) -> tuple[Path, Path]:
    long_file = folder / "annals.jsonl"
    record = {"id": "annals", "title": LONG_TITLE, "text": LONG_TEXT}
    long_file.write_text(json.dumps({**record, "metadata": {"tenant": "acme"}}) + "\n")
    others = folder / "others.jsonl"
    others.write_text(
        "".join(
            json.dumps({"id": i, "text": t, "metadata": {"tenant": "globex"}}) + "\n"
            for i, t in OTHERS
        )
    )
    return long_file, others


def ingest(tmp_path: Path, passages) -> tuple[dict, Path, Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    long_file, others = write_corpus(corpus)
    backend_config: dict = {"path": "edge", "passages": passages}
    entry = {"name": "dense", "backend": "qdrant_edge", "backend_config": backend_config}
    lexical = {"name": "lexical", "backend": "bm25"}
    config = parse_config({"retrievers": [lexical, entry], "generator": {"min_similarity": None}})
    # whole documents: a chunk size larger than any record
    ingest_paths([corpus], config, tmp_path, progress=False, chunk_size=20_000)
    return entry, long_file, others, config


def retriever(entry: dict, base_dir: Path):
    return build_retriever(EdgeEntry.model_validate(entry), base_dir, EmbeddingsConfig())


def points_of(base_dir: Path, record_id: str) -> int:
    shard = open_revision(QdrantEdgeSettings(path="edge").store_dir(base_dir)).shard
    condition = FieldCondition(key="metadata.record_id", match=MatchValue(record_id))
    records, _ = shard.scroll(ScrollRequest(limit=1000, filter=Filter(must=[condition])))
    return len(records)


def test_the_answer_sits_past_what_the_model_reads():
    splitter = passage_splitter(load_embeddings(), BUNDLED, PassageSettings())
    assert splitter is not None and splitter.room + 2 == 256
    assert splitter.count(f"{LONG_TITLE}\n{FILLER * 8}") > 256


@pytest.fixture(scope="module")
def with_passages(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("passages")
    return base_dir, *ingest(base_dir, PASSAGES)


def test_the_long_document_is_found_by_a_later_passage_and_returned_whole_once(with_passages):
    base_dir, entry, *_ = with_passages
    assert points_of(base_dir, "annals") > 1  # stored as several passages
    docs = retriever(entry, base_dir).invoke(QUESTION, k=5)
    assert docs[0].metadata["record_id"] == "annals"
    assert docs[0].page_content == f"{LONG_TITLE}\n{LONG_TEXT}"  # the whole document
    assert docs[0].metadata["title"] == LONG_TITLE
    assert len(docs) == 5 and len({d.id for d in docs}) == 5  # k documents, each once
    scores = [d.metadata["retrieval_score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_without_passages_the_model_never_reads_the_answer(tmp_path):
    entry, *_ = ingest(tmp_path, None)
    assert points_of(tmp_path, "annals") == 1
    docs = retriever(entry, tmp_path).invoke(QUESTION, k=5)
    assert docs[0].metadata["record_id"] != "annals"


def test_filters_apply_to_passages(with_passages):
    base_dir, entry, *_ = with_passages
    dense = retriever(entry, base_dir)
    found = dense.invoke(QUESTION, k=5, filters={"tenant": "globex"})
    assert len(found) == 4 and {d.metadata["record_id"] for d in found} == {i for i, _ in OTHERS}
    acme = dense.invoke(QUESTION, k=5, filters={"tenant": "acme"})
    assert [d.metadata["record_id"] for d in acme] == ["annals"]


def test_a_threshold_counts_the_best_passage(with_passages):
    base_dir, entry, *_ = with_passages
    best = retriever(entry, base_dir).invoke(QUESTION, k=1)[0]
    score = best.metadata["retrieval_score"]
    strict = retriever({**entry, "similarity_threshold": round(score - 0.01, 4)}, base_dir)
    assert [d.metadata["record_id"] for d in strict.invoke(QUESTION, k=5)] == ["annals"]


def test_deleting_the_file_removes_every_passage(tmp_path):
    entry, long_file, others, config = ingest(tmp_path, PASSAGES)
    assert points_of(tmp_path, "annals") > 1
    settings = EdgeEntry.model_validate(entry).backend_config
    store = QdrantEdgeStore(settings, BackendContext(tmp_path, BUNDLED, "cpu"))
    long_file_id = next(iter({fid for _, fid, _ in store.fingerprints(_file_ids(tmp_path))}))
    store.write(_empty_batch(), [long_file_id])
    assert points_of(tmp_path, "annals") == 0
    remaining = retriever(entry, tmp_path).invoke(QUESTION, k=10)
    assert {d.metadata["record_id"] for d in remaining} == {i for i, _ in OTHERS}


def test_a_chunk_written_again_shorter_leaves_no_stale_passages(tmp_path):
    settings = QdrantEdgeSettings(path=str(tmp_path), passages=PASSAGES)
    model = load_embeddings()
    text = f"{LONG_TITLE}\n{LONG_TEXT}"

    def put(content: str) -> None:
        write_chunks(
            settings,
            None,
            ids=["annals"],
            texts=[content],
            metadatas=[{"file_id": "f", "record_id": "annals"}],
            vectors=model.embed_documents([content]),
            replace_file_ids=[],
            sentences=GeneratorSentences(BUNDLED),
        )

    put(text)
    shard = open_revision(settings.store_dir()).shard
    assert shard.info().points_count > 1
    put("Annals\nA short note.")
    assert open_revision(settings.store_dir()).shard.info().points_count == 1


def test_changed_passage_settings_write_every_file_again(with_passages):
    base_dir, entry, *_ = with_passages
    settings = EdgeEntry.model_validate(entry).backend_config
    context = BackendContext(base_dir, BUNDLED, "cpu")
    same = QdrantEdgeStore(settings, context).fingerprints(_file_ids(base_dir))
    assert same  # unchanged settings: ingest compares fingerprints
    other = settings.model_copy(update={"passages": None})
    assert QdrantEdgeStore(other, context).fingerprints(_file_ids(base_dir)) is None


def _file_ids(base_dir: Path) -> list[str]:
    shard = open_revision(QdrantEdgeSettings(path="edge").store_dir(base_dir)).shard
    condition = FieldCondition(key="metadata.record_id", match=MatchValue("annals"))
    records, _ = shard.scroll(
        ScrollRequest(limit=1, filter=Filter(must=[condition]), with_payload=True)
    )
    return [records[0].payload["metadata"]["file_id"]]


def _empty_batch():
    from parallel_rag.backends.base import ChunkBatch

    return ChunkBatch(ids=[], texts=[], metadatas=[], vectors=[])
