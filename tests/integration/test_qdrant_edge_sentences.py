"""Dense scored by passages and sentences together (``qdrant_edge`` ``passages.sentence_weight``):
each chunk's sentences are embedded at ingest into the revision's sentence shard, and a chunk's
score is ``(1 - w) x best passage + w x best sentence``, exactly, whichever search met it. Real
parts: the packaged MiniLM, ingest's code path, the embedded Qdrant Edge store."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from parallel_rag.backends.base import BackendContext
from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings
from parallel_rag.backends.qdrant_edge.points import (
    passage_point_id,
    passage_splitter,
    passage_uuids,
    sentence_point_id,
    sentence_uuids,
)
from parallel_rag.backends.qdrant_edge.retriever import (
    DEFAULT_SENTENCE_WEIGHT,
    QdrantEdgeSettings,
    QdrantEdgeStore,
)
from parallel_rag.backends.qdrant_edge.search import (
    RANKING_PAYLOAD,
    best_per_chunk,
    edge_filter,
    mixed_scores,
    open_revision,
    scored_hit,
)
from parallel_rag.backends.qdrant_edge.writes import SENTENCES_DIR, write_chunks
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.nodes.generate.sentences import split_sentences
from parallel_rag.studio.ingestion import ingest_paths
from qdrant_edge import Query, QueryRequest

pytestmark = pytest.mark.integration
EdgeEntry = ENTRY_MODELS["qdrant_edge"]

# Each record: a title line, then sentences; the claim restates one sentence of "statins".
RECORDS = [
    (
        "statins",
        "Cholesterol therapy in older adults",
        "Lipid lowering is common in clinical practice. Many trials enrolled middle-aged men. "
        "Statin therapy reduced the rate of stroke in patients over seventy by a third. "
        "Adverse events were mostly muscle pain. Adherence fell after two years.",
    ),
    (
        "stroke",
        "Stroke rehabilitation",
        "Stroke survivors benefit from early mobilisation. Physiotherapy improves gait. "
        "Speech therapy helps aphasia after a stroke in older patients.",
    ),
    (
        "muscle",
        "Exercise and muscle",
        "Resistance training builds muscle in adults of every age. Protein intake matters too.",
    ),
    (
        "sleep",
        "Sleep and memory",
        "Sleep consolidates memories. Deprivation impairs attention the next day.",
    ),
    ("label", "Short note", "no sentence here"),
]
CLAIM = "Statins lower stroke risk in people older than seventy."


def write_corpus(folder: Path) -> None:
    lines = [
        json.dumps({"id": i, "title": t, "text": x, "metadata": {"group": i[0]}})
        for i, t, x in RECORDS
    ]
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")


def ingest(base_dir: Path, passages, **settings) -> dict:
    corpus = base_dir / "corpus"
    corpus.mkdir()
    write_corpus(corpus)
    entry = {
        "name": "dense",
        "backend": "qdrant_edge",
        "backend_config": {"path": "edge", "passages": passages, **settings},
    }
    config = parse_config(
        {"retrievers": [{"name": "lexical", "backend": "bm25"}, entry], "generator": {}}
    )
    ingest_paths([corpus], config, base_dir, progress=False, chunk_size=20_000)
    return entry


def retriever(entry: dict, base_dir: Path):
    return build_retriever(EdgeEntry.model_validate(entry), base_dir, EmbeddingsConfig())


def exact_scores(weight: float, query: str) -> dict[str, float]:
    """Each record's score computed by hand with the model: its best passage (the whole text
    here: every record is shorter than the model reads) and its best sentence."""
    model = load_embeddings()
    q = np.asarray(model.embed_query(query))
    scores = {}
    for record_id, title, text in RECORDS:
        content = f"{title}\n{text}"
        passage = float(np.asarray(model.embed_documents([content])[0]) @ q)
        sentences = split_sentences(content)
        if sentences:
            best = float(np.max(np.asarray(model.embed_documents(sentences)) @ q))
            scores[record_id] = (1 - weight) * passage + weight * best
        else:
            scores[record_id] = passage
    return scores


@pytest.fixture(scope="module")
def with_sentences(tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("sentences")
    return base_dir, ingest(base_dir, {})


def test_chunk_sentences_skip_titles_headings_and_list_markers():
    text = "# Heading\nA title line\n- First point is here. Second one follows!\nshort label"
    assert split_sentences(text) == ["First point is here.", "Second one follows!"]
    assert split_sentences("Ends with a stop.") == ["Ends with a stop."]
    assert split_sentences("e.g. lower case after a stop. Stays one sentence.") == [
        "e.g. lower case after a stop.",
        "Stays one sentence.",
    ]


def test_the_default_embeds_every_sentence_into_the_sentence_shard(with_sentences):
    base_dir, _ = with_sentences
    assert DEFAULT_SENTENCE_WEIGHT == 0.5
    held = open_revision(QdrantEdgeSettings(path="edge").store_dir(base_dir))
    expected = sum(len(split_sentences(f"{t}\n{x}")) for _, t, x in RECORDS)
    assert held.manifest["sentences"] == expected == held.sentences.info().points_count
    assert held.shard.info().points_count == len(RECORDS)  # passages: one each here
    assert held.manifest["passages"]["sentence_weight"] == DEFAULT_SENTENCE_WEIGHT


def test_scores_are_the_exact_mix_of_best_passage_and_best_sentence(with_sentences):
    base_dir, entry = with_sentences
    expected = exact_scores(DEFAULT_SENTENCE_WEIGHT, CLAIM)
    for k in (1, 2, len(RECORDS)):
        docs = retriever(entry, base_dir).invoke(CLAIM, k=k)
        ranked = sorted(expected, key=expected.get, reverse=True)[:k]
        assert [d.metadata["record_id"] for d in docs] == ranked
        for doc in docs:
            assert doc.metadata["retrieval_score"] == pytest.approx(
                expected[doc.metadata["record_id"]], abs=1e-4
            )
            assert doc.page_content.startswith(
                next(t for i, t, _ in RECORDS if i == doc.metadata["record_id"])
            )
    assert docs[0].metadata["record_id"] == "statins"


def test_weight_zero_keeps_the_best_passage_alone_and_no_sentence_shard(tmp_path):
    entry = ingest(tmp_path, {"sentence_weight": 0})
    directory = QdrantEdgeSettings(path="edge").store_dir(tmp_path)
    held = open_revision(directory)
    assert held.sentences is None and held.manifest["sentences"] == 0
    assert not (directory / held.revision / SENTENCES_DIR).exists()
    expected = exact_scores(0.0, CLAIM)
    docs = retriever(entry, tmp_path).invoke(CLAIM, k=len(RECORDS))
    assert [d.metadata["record_id"] for d in docs] == sorted(
        expected, key=expected.get, reverse=True
    )
    for doc in docs:
        assert doc.metadata["retrieval_score"] == pytest.approx(
            expected[doc.metadata["record_id"]], abs=1e-4
        )


def shard_build(folder: Path) -> dict:
    """The HNSW build settings the engine keeps with a shard."""
    return json.loads((folder / "edge_config.json").read_text())["hnsw_config"]


def segment_cap_mb(folder: Path) -> int | None:
    """The largest segment the engine builds in a shard, in MB of stored vectors."""
    cap = json.loads((folder / "edge_config.json").read_text())["optimizers"]["max_segment_size"]
    return cap // 1024 if cap else None


def test_each_shard_is_capped_at_its_own_segment_size(with_sentences, tmp_path):
    """A passage point also stores its chunk's text and metadata, so at one vector count its
    segment is the largest a write rebuilds: the passage shard gets half the sentence shard's
    cap by default, and either is a setting of the backend."""
    base_dir, _ = with_sentences
    settings = QdrantEdgeSettings(path="edge")
    assert (settings.segment_mb, settings.sentence_segment_mb) == (64, 128)
    revision = settings.store_dir(base_dir) / open_revision(settings.store_dir(base_dir)).revision
    assert segment_cap_mb(revision) == 64
    assert segment_cap_mb(revision / SENTENCES_DIR) == 128

    ingest(tmp_path, {}, segment_mb=16, sentence_segment_mb=None)
    directory = QdrantEdgeSettings(path="edge").store_dir(tmp_path)
    revision = directory / open_revision(directory).revision
    assert segment_cap_mb(revision) == 16
    assert segment_cap_mb(revision / SENTENCES_DIR) is None
    with pytest.raises(ValueError, match="sentence_segment_mb"):
        EdgeEntry.model_validate(
            {
                "name": "dense",
                "backend": "qdrant_edge",
                "backend_config": {"sentence_segment_mb": 8},
            }
        )


def test_each_shard_is_built_with_its_own_beam(with_sentences, tmp_path):
    """The passage index gets the wider build (the shard every query's candidates mostly come
    from); the sentence index, with several points a chunk, the cheaper one. Both are
    settings of the backend, and a collection built with others still answers exactly."""
    base_dir, _ = with_sentences
    settings = QdrantEdgeSettings(path="edge")
    assert (settings.ef_construct, settings.sentence_ef_construct) == (200, 100)
    held = open_revision(settings.store_dir(base_dir))
    revision = settings.store_dir(base_dir) / held.revision
    assert shard_build(revision)["ef_construct"] == 200
    assert shard_build(revision / SENTENCES_DIR)["ef_construct"] == 100

    entry = ingest(tmp_path, {}, ef_construct=48, sentence_ef_construct=24, m=8)
    directory = QdrantEdgeSettings(path="edge").store_dir(tmp_path)
    revision = directory / open_revision(directory).revision
    passage_build, sentence_build = shard_build(revision), shard_build(revision / SENTENCES_DIR)
    assert (passage_build["ef_construct"], passage_build["m"]) == (48, 8)
    assert (sentence_build["ef_construct"], sentence_build["m"]) == (24, 8)
    expected = exact_scores(DEFAULT_SENTENCE_WEIGHT, CLAIM)
    docs = retriever(entry, tmp_path).invoke(CLAIM, k=len(RECORDS))
    assert [d.metadata["record_id"] for d in docs] == sorted(
        expected, key=expected.get, reverse=True
    )
    with pytest.raises(ValueError, match="sentence_ef_construct"):
        EdgeEntry.model_validate(
            {
                "name": "dense",
                "backend": "qdrant_edge",
                "backend_config": {"sentence_ef_construct": 0},
            }
        )


def test_filters_and_thresholds_apply_to_the_mixed_score(with_sentences):
    base_dir, entry = with_sentences
    dense = retriever(entry, base_dir)
    found = dense.invoke(CLAIM, k=5, filters={"group": "m"})
    assert [d.metadata["record_id"] for d in found] == ["muscle"]
    expected = exact_scores(DEFAULT_SENTENCE_WEIGHT, CLAIM)
    cut = (expected["statins"] + sorted(expected.values())[-2]) / 2
    strict = retriever({**entry, "similarity_threshold": round(cut, 4)}, base_dir)
    assert [d.metadata["record_id"] for d in strict.invoke(CLAIM, k=5)] == ["statins"]


def test_a_chunk_written_again_keeps_no_stale_sentences(tmp_path):
    settings = QdrantEdgeSettings(path=str(tmp_path))
    model = load_embeddings()

    def put(content: str, replace: list[str]) -> None:
        write_chunks(
            settings,
            None,
            ids=["note"],
            texts=[content],
            metadatas=[{"file_id": "f"}],
            vectors=model.embed_documents([content]),
            replace_file_ids=replace,
            sentences=GeneratorSentences(BUNDLED),
        )

    put("Note\nOne sentence here. Two sentences here. Three sentences here.", [])
    assert open_revision(settings.store_dir()).sentences.info().points_count == 3
    put("Note\nOnly one sentence is left now.", [])
    assert open_revision(settings.store_dir()).sentences.info().points_count == 1
    write_chunks(
        settings,
        None,
        ids=[],
        texts=[],
        metadatas=[],
        vectors=[],
        replace_file_ids=["f"],
        sentences=GeneratorSentences(BUNDLED),
    )
    held = open_revision(settings.store_dir())
    assert held.shard.info().points_count == 0 and held.sentences.info().points_count == 0


def test_a_changed_sentence_weight_writes_every_file_again(with_sentences):
    base_dir, entry = with_sentences
    settings = EdgeEntry.model_validate(entry).backend_config
    context = BackendContext(base_dir, BUNDLED, "cpu")
    held = open_revision(settings.store_dir(base_dir))
    file_ids = sorted({r.payload["metadata"]["file_id"] for r in _records(held)})
    assert QdrantEdgeStore(settings, context).fingerprints(file_ids)
    other = settings.model_copy(
        update={"passages": settings.passages.model_copy(update={"sentence_weight": 0.3})}
    )
    assert QdrantEdgeStore(other, context).fingerprints(file_ids) is None


QUERIES = [
    CLAIM,
    "Does sleep help memory?",
    "muscle pain as an adverse event of statins",
    "speech therapy for aphasia",
]


def brute_force(held, query: list[float], weight: float, filters: dict | None) -> list:
    """Every chunk's mixed score from every stored vector (no search): its best passage, its
    best sentence, ``(1 - w) x passage + w x sentence`` (the passage alone without sentences),
    best first."""
    from qdrant_edge import ScrollRequest

    def points(shard):
        return shard.scroll(ScrollRequest(limit=10_000, with_payload=True, with_vector=True))[0]

    def unit(vector):
        array = np.asarray(vector, dtype=np.float64)
        return array / np.linalg.norm(array)

    q = unit(query)
    best: dict[str, dict[str, float]] = {}
    for kind, shard in (("passage", held.shard), ("sentence", held.sentences)):
        for point in points(shard):
            meta = point.payload["metadata"]
            if filters and any(meta.get(key) != value for key, value in filters.items()):
                continue
            scores = best.setdefault(point.payload["id"], {})
            scores[kind] = max(scores.get(kind, -2.0), float(unit(point.vector) @ q))
    mixed = {
        chunk: s["passage"]
        if "sentence" not in s
        else (1 - weight) * s["passage"] + weight * s["sentence"]
        for chunk, s in best.items()
    }
    return sorted(mixed.items(), key=lambda item: -item[1])


def test_the_ranking_equals_the_mixed_score_of_every_chunk_for_any_k_and_filter(with_sentences):
    """Whichever search met a chunk (passages, sentences, or both), the top k are the k best
    chunks by the mixed score over all chunks, with those scores."""
    base_dir, entry = with_sentences
    dense = retriever(entry, base_dir)
    held = open_revision(QdrantEdgeSettings(path="edge").store_dir(base_dir))
    model = load_embeddings()
    for query in QUERIES:
        vector = model.embed_query(query)
        for filters in (None, {"group": "s"}, {"group": "m"}):
            expected = brute_force(held, vector, DEFAULT_SENTENCE_WEIGHT, filters)
            for k in (1, 2, 3, len(RECORDS)):
                docs = dense.invoke(query, k=k, filters=filters)
                assert [d.id for d in docs] == [chunk for chunk, _ in expected[:k]], (query, k)
                for doc, (_, score) in zip(docs, expected, strict=False):
                    assert doc.metadata["retrieval_score"] == pytest.approx(score, abs=1e-4)
                # every candidate either search met is scored in full (not only the top k):
                # few passage hits leave chunks met by a sentence only, many leave chunks met
                # by a passage only
                for passage_hits in (1, len(RECORDS)):
                    ranked = mixed(held, vector, passage_hits, k, filters)
                    assert ranked
                    for hit in ranked:
                        assert hit["score"] == pytest.approx(dict(expected)[hit["id"]], abs=1e-4)
                # every chunk a candidate: the top k are the brute-force top k
                assert [h["id"] for h in ranked[:k]] == [c for c, _ in expected[:k]]


def mixed(held, vector: list[float], passage_hits: int, k: int, filters: dict | None) -> list:
    """``mixed_scores`` over the chunks of the best ``passage_hits`` passages."""
    hits = held.shard.query(
        QueryRequest(
            limit=passage_hits,
            query=Query.Nearest(vector),
            filter=edge_filter(filters),
            with_payload=True,
        )
    )
    found = [scored_hit(hit) for hit in best_per_chunk(hits).values()]
    searched = QdrantEdgeSettings(hnsw_ef=64)
    return mixed_scores(held, vector, found, k, filters, DEFAULT_SENTENCE_WEIGHT, searched)


def test_point_ids_derived_in_series_are_the_stored_ids():
    for chunk in ["statins", "\u00e9t\u00e9#1", "3f2b7a5e-1c0d-4a8e-9f00-000000000001"]:
        assert [str(u) for u in sentence_uuids(chunk, 12)] == [
            sentence_point_id(chunk, n) for n in range(12)
        ]
        assert [str(u) for u in passage_uuids(chunk, range(4))] == [
            passage_point_id(chunk, n) for n in range(4)
        ]


def test_records_fit_what_the_model_reads():
    splitter = passage_splitter(load_embeddings(), BUNDLED, QdrantEdgeSettings().passages)
    assert all(splitter.count(f"{t}\n{x}") <= splitter.room for _, t, x in RECORDS)


def _records(held):
    from qdrant_edge import ScrollRequest

    return held.shard.scroll(ScrollRequest(limit=100, with_payload=True))[0]


def test_a_write_makes_its_points_a_batch_of_chunks_at_a_time(tmp_path, monkeypatch):
    """A million-chunk collection is six million points: the write makes and embeds them a
    batch of chunks at a time, and the batches add up to the same exact scores."""
    from parallel_rag.backends.qdrant_edge import retriever as qdrant_edge
    from parallel_rag.backends.qdrant_edge import writes as qdrant_edge_writes

    model = load_embeddings()
    made: list[tuple[str, list[str]]] = []

    def spy(name):
        real = getattr(qdrant_edge_writes, name)

        def record(batch, *args, **kwargs):
            made.append((name, list(batch.ids)))
            return real(batch, *args, **kwargs)

        monkeypatch.setattr(qdrant_edge_writes, name, record)

    spy("passage_points")
    spy("sentence_points")
    monkeypatch.setattr(qdrant_edge_writes, "WRITE_BATCH", 2)
    contents = [f"{title}\n{text}" for _, title, text in RECORDS]
    ids = [record_id for record_id, _, _ in RECORDS]
    settings = QdrantEdgeSettings(path=str(tmp_path / "edge"))
    write_chunks(
        settings,
        None,
        ids=ids,
        texts=contents,
        metadatas=[{"file_id": "records", "record_id": r} for r in ids],
        vectors=model.embed_documents(contents),
        replace_file_ids=[],
        sentences=GeneratorSentences(BUNDLED),
    )
    batches = [ids[0:2], ids[2:4], ids[4:5]]
    assert made == [("passage_points", b) for b in batches] + [
        ("sentence_points", b) for b in batches
    ]
    held = open_revision(settings.store_dir())
    assert held.sentences.info().points_count == sum(len(split_sentences(c)) for c in contents)
    assert held.shard.info().points_count == len(RECORDS)
    monkeypatch.undo()
    expected = exact_scores(DEFAULT_SENTENCE_WEIGHT, CLAIM)
    docs = qdrant_edge.QdrantEdgeRetriever(settings=settings, k=len(RECORDS)).invoke(CLAIM)
    assert [d.metadata["record_id"] for d in docs] == sorted(expected, key=expected.get)[::-1]
    for doc in docs:
        assert doc.metadata["retrieval_score"] == pytest.approx(
            expected[doc.metadata["record_id"]], abs=1e-4
        )


def serve_sentence_shard(monkeypatch, held, sentences) -> None:
    """Every retriever opens ``held`` with ``sentences`` in place of its sentence shard."""
    from parallel_rag.backends.qdrant_edge import retriever as qdrant_edge

    served = SimpleNamespace(
        revision=held.revision, manifest=held.manifest, shard=held.shard, sentences=sentences
    )
    monkeypatch.setattr(qdrant_edge, "open_revision", lambda directory: served)


class SentenceSearchMisses:
    """A sentence shard whose approximate search finds nothing, as an HNSW graph does for a
    point it cannot reach; exact scoring of named points still works."""

    def __init__(self, shard):
        self.shard = shard

    def query(self, request):
        return self.shard.query(request) if request.params.exact else []


# one long chunk whose ten passages all match the claim's topic, and a short chunk with the
# claim's own sentence among unrelated ones: the short chunk's passage ranks below every
# passage of the long one, its mixed score above the long one's
CROWDING = [
    (
        "long",
        "Statins in older people",
        " ".join(
            [
                "Statin therapy in older patients has been studied in many cohorts.",
                "Cholesterol lowering drugs are prescribed widely to elderly people.",
                "Statins reduce cardiovascular events in adults over sixty five.",
                "Trials of statins in the elderly report fewer heart attacks.",
                "Older people taking statins had lower cholesterol after a year.",
                "Statin use among seniors has risen over two decades.",
                "Guidelines discuss statins for primary prevention in old age.",
                "Elderly patients on statins reported muscle aches occasionally.",
                "Statin prescriptions for people above seventy vary by country.",
                "Doctors weigh the benefits of statins for aged patients carefully.",
            ]
            * 2
        ),
    ),
    (
        "garden",
        "Garden diary",
        "Tomatoes need full sun and steady water. "
        "Statins lower stroke risk in people older than seventy. "
        "Compost improves the soil every spring.",
    ),
    ("sleep", "Sleep and memory", "Sleep consolidates memories. Deprivation impairs attention."),
    ("muscle", "Exercise and muscle", "Resistance training builds muscle in adults of every age."),
]


def test_the_passage_search_proposes_enough_chunks_when_the_sentence_search_misses(
    tmp_path, monkeypatch
):
    """A chunk of several passages fills several hits of the passage search, and a chunk of
    the mixed top k can rank below all of them by its best passage: the passage search
    proposes ``candidates`` x k distinct chunks (a setting), so such a chunk is still found when
    the sentence search misses it; with ``candidates`` 1 it is not."""

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [json.dumps({"id": i, "title": t, "text": x}) for i, t, x in CROWDING]
    (corpus / "records.jsonl").write_text("\n".join(lines) + "\n")
    entry = {
        "name": "dense",
        "backend": "qdrant_edge",
        "backend_config": {"path": "edge", "passages": {"max_tokens": 32}},
    }
    config = parse_config(
        {"retrievers": [{"name": "lexical", "backend": "bm25"}, entry], "generator": {}}
    )
    ingest_paths([corpus], config, tmp_path, progress=False, chunk_size=20_000)
    dense = retriever(entry, tmp_path)
    held = open_revision(QdrantEdgeSettings(path="edge").store_dir(tmp_path))
    vector = load_embeddings().embed_query(CLAIM)
    expected = [c for c, _ in brute_force(held, vector, DEFAULT_SENTENCE_WEIGHT, None)]
    hits = held.shard.query(
        QueryRequest(limit=8, query=Query.Nearest(vector), with_payload=RANKING_PAYLOAD)
    )
    assert len({hit.payload["id"] for hit in hits}) == 1  # the long chunk's passages crowd out
    assert expected[0] not in {hit.payload["id"] for hit in hits}  # the mixed best chunk
    serve_sentence_shard(monkeypatch, held, SentenceSearchMisses(held.sentences))
    for k in (1, 2):
        assert [d.id for d in dense.invoke(CLAIM, k=k)] == expected[:k], k
    # proposing one chunk per result wanted, the long chunk's passages fill the search
    narrow = retriever(
        {**entry, "backend_config": {**entry["backend_config"], "candidates": 1}}, tmp_path
    )
    assert [d.id for d in narrow.invoke(CLAIM, k=1)] != expected[:1]


class SentenceSearchReturnsLesser:
    """A sentence shard whose approximate search returns a chunk's lesser sentences but not
    its best one, as an HNSW search can at scale; exact scoring of named points still works."""

    def __init__(self, shard):
        self.shard = shard

    def query(self, request):
        hits = self.shard.query(request)
        if request.params.exact:
            return hits
        best = best_per_chunk(hits)  # each chunk's first hit is its best: drop it
        return [hit for hit in hits if hit is not best[hit.payload["id"]]]


def test_a_chunk_met_by_a_lesser_sentence_is_scored_by_its_best(with_sentences, monkeypatch):
    """The sentence search only proposes chunks: a chunk it met by a lesser sentence than its
    best is still scored by its best (at 1M chunks x 5 sentences, scoring it by the sentence
    the search returned cost recall@10 0.944 -> 0.887 as the search went deeper)."""

    base_dir, entry = with_sentences
    held = open_revision(QdrantEdgeSettings(path="edge").store_dir(base_dir))
    serve_sentence_shard(monkeypatch, held, SentenceSearchReturnsLesser(held.sentences))
    dense = retriever(entry, base_dir)
    model = load_embeddings()
    for query in QUERIES:
        expected = brute_force(held, model.embed_query(query), DEFAULT_SENTENCE_WEIGHT, None)
        docs = dense.invoke(query, k=len(RECORDS))
        assert [d.id for d in docs] == [chunk for chunk, _ in expected], query
        for doc, (_, score) in zip(docs, expected, strict=True):
            assert doc.metadata["retrieval_score"] == pytest.approx(score, abs=1e-4)
