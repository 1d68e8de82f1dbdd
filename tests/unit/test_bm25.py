"""Unit tests for the BM25 lexical backend and its text analyzer (small in-test corpora)."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path

import numpy as np
import pytest
from langchain_core.runnables import RunnableLambda
from parallel_rag.backends.base import SCORE_KEY, retrieval_kind_of
from parallel_rag.backends.bm25 import analysis
from parallel_rag.backends.bm25 import storage as bm25_storage
from parallel_rag.backends.bm25.analysis import Analyzer, analyze, analyze_batch, get_analyzer
from parallel_rag.backends.bm25.chunks import BM25Chunk
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.retriever import BM25Retriever
from parallel_rag.backends.bm25.settings import BM25Settings
from parallel_rag.backends.bm25.top_k import select_top_k
from pydantic import ValidationError

TOPICS = ["biology", "physics", "cooking", "sports", "history"]

SENTENCES = [
    "Cells divide by mitosis and the chromosomes are copied before division.",
    "Mitochondria produce energy for the cell through cellular respiration.",
    "DNA replication copies the genome before a cell divides.",
    "Proteins fold into shapes that determine their biological function.",
    "Enzymes speed up chemical reactions inside living cells.",
    "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
    "Viruses infect host cells and hijack their replication machinery.",
    "The immune system produces antibodies against infecting viruses.",
    "Neurons transmit electrical signals through synapses in the brain.",
    "Gene expression is regulated by transcription factors binding DNA.",
    "Quantum mechanics describes particles as probability waves.",
    "Einstein's relativity links energy and mass: energy equals mass times c squared.",
    "Black holes bend light with their enormous gravity.",
    "Electrons orbit the nucleus in discrete energy levels.",
    "Thermodynamics says entropy of an isolated system never decreases.",
    "The speed of light in vacuum is a universal constant.",
    "Superconductors carry electrical current without resistance when cooled.",
    "Gravity waves were detected by laser interferometers in 2015.",
    "A prism splits white light into a spectrum of colours.",
    "Nuclear fission releases energy by splitting heavy atoms.",
    "Knead the bread dough for ten minutes until it is smooth.",
    "Simmer the tomato sauce slowly with garlic and basil.",
    "Bake the cake at 180 degrees until a skewer comes out clean.",
    "Whisk eggs and sugar until the mixture is pale and fluffy.",
    "Roast the vegetables with olive oil, salt and pepper.",
    "Boil the pasta in salted water and drain it al dente.",
    "Marinate the chicken overnight in yogurt and spices.",
    "Caramelise onions slowly over a low heat for sweetness.",
    "Fresh basil and garlic make a fragrant pesto sauce.",
    "Let the bread dough rise in a warm place for an hour.",
    "The football team scored twice in the second half.",
    "Tennis players serve the ball from behind the baseline.",
    "The marathon runner finished the race in under three hours.",
    "Basketball teams score points by shooting the ball through the hoop.",
    "The cyclist climbed the mountain pass during the stage race.",
    "Swimmers train for hours every day in the pool.",
    "The goalkeeper saved a penalty in the final minute.",
    "Running every morning improves cardiovascular fitness.",
    "The relay team passed the baton cleanly to win the race.",
    "The referee showed the player a red card for a foul.",
    "The Roman Empire built roads and aqueducts across Europe.",
    "The printing press spread books and ideas across Europe.",
    "The French Revolution began with the storming of the Bastille.",
    "Ancient Egyptians built pyramids as tombs for their pharaohs.",
    "The Industrial Revolution transformed manufacturing with steam engines.",
    "The Silk Road connected traders from China to the Mediterranean.",
    "Medieval castles were built with thick stone walls for defence.",
    "The Renaissance revived interest in classical art and science.",
    "World War One ended with the armistice of November 1918.",
    "The cell membrane controls what enters and leaves the cell.",
    "The cell membrane controls what enters and leaves the cell.",  # exact duplicate: a tie
]

QUERIES = [
    "how do cells divide",
    "energy of light and mass",
    "bread dough rising",
    "garlic basil sauce",
    "race running team",
    "revolution in Europe",
    "viruses infecting cells replication",
    "cell membrane",
    "ball score",
    "the the the",  # stopwords only: no hits
    "xylophone zeppelin",  # out of vocabulary: no hits
]


def make_chunks() -> list[tuple[str, str, dict]]:
    return [
        (f"doc-{i:02d}", text, {"topic": TOPICS[min(i // 10, 4)], "even": i % 2 == 0})
        for i, text in enumerate(SENTENCES)
    ]


@pytest.fixture(scope="module")
def chunks() -> list[tuple[str, str, dict]]:
    return make_chunks()


@pytest.fixture(scope="module")
def index(chunks) -> BM25Index:
    return BM25Index.from_chunks(chunks)


def ids(hits) -> list[str]:
    return [hit.chunk.id for hit in hits]


def distinct_score_ids(hits) -> list[str]:
    """Ids of hits whose score is not (nearly) tied with another hit's, in rank order."""
    return [h.chunk.id for h in hits if sum(math.isclose(h.score, o.score) for o in hits) == 1]


def save_index(index: BM25Index, tmp_path: Path, name: str = "bm25") -> Path:
    path = tmp_path / name
    index.save(path)
    return path


# -- analyzer --------------------------------------------------------------------------


def test_english_analyzer_lowercases_stems_and_drops_stopwords():
    assert analyze("The Runners were RUNNING to the Cities!") == ["runner", "were", "run", "citi"]
    assert "the" not in analyze("the and of a to in is it")
    assert analyze("the and of a to in is it") == []


def test_english_analyzer_unicode_and_numbers():
    assert analyze("Café 2015 x-ray CO2") == ["café", "2015", "x", "ray", "co2"]


def test_plain_analyzer_only_lowercases_and_splits():
    plain = get_analyzer("plain")
    assert plain.analyze("The Runners were RUNNING.") == ["the", "runners", "were", "running"]
    assert analyze("The Runners", analyzer="plain") == ["the", "runners"]


def test_analyze_batch_matches_analyze():
    texts = ["Cells divide quickly.", "", "The cats"]
    assert analyze_batch(texts) == [analyze(t) for t in texts]
    assert analyze_batch(texts) == [["cell", "divid", "quick"], [], ["cat"]]


def test_unknown_analyzer_rejected():
    with pytest.raises(ValueError, match="unknown analyzer"):
        Analyzer("french")  # type: ignore[arg-type]


# -- settings --------------------------------------------------------------------------


def test_settings_defaults():
    s = BM25Settings()
    assert (s.index_path, s.engine, s.k1, s.b) == (".parallel-rag/bm25", "bm25s", 1.5, 0.75)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"k1": 0}, "k1"),
        ({"k1": -1.0}, "k1"),
        ({"b": 1.5}, "b"),
        ({"b": -0.1}, "b"),
        ({"engine": "lucene"}, "engine"),
        ({"index_dir": "x"}, "index_dir"),
    ],
)
def test_settings_validation_names_the_field(config, field):
    with pytest.raises(ValidationError) as info:
        BM25Settings(**config)
    assert field in {str(err["loc"][0]) for err in info.value.errors()}
    assert field in str(info.value)


# -- ranking ---------------------------------------------------------------------------


def test_ranking_is_sensible(index):
    assert ids(index.search("mitochondria respiration", k=1)) == ["doc-01"]
    top = ids(index.search("bread dough", k=2))
    assert set(top) == {"doc-20", "doc-29"}
    # stemming: "divides"/"division"/"divide" share the stem "divid"
    assert {"doc-00", "doc-02"} <= set(ids(index.search("dividing cells", k=5)))
    # a rarer term weighs more than a common one
    hits = index.search("cell pyramids", k=3)
    assert hits[0].chunk.id == "doc-43"


def test_scores_descending_positive_and_ties_by_position(index):
    for query in QUERIES:
        hits = index.search(query, k=50)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(s > 0 for s in scores)
    hits = index.search("cell membrane", k=2)
    assert ids(hits) == ["doc-49", "doc-50"]  # identical text: lower corpus position first
    assert hits[0].score == hits[1].score


def test_no_hits_for_stopword_or_unknown_queries(index):
    assert index.search("the the the") == []
    assert index.search("xylophone zeppelin") == []
    assert index.search("") == []


def test_query_terms_are_deduplicated(index):
    assert index.query_terms("cell cells CELL xylophone") == ["cell"]
    once = index.search("cell", k=5)
    repeated = index.search("cell cell cells", k=5)
    assert [(h.chunk.id, h.score) for h in once] == [(h.chunk.id, h.score) for h in repeated]


def test_k_cut(index):
    assert len(index.search("the cell", k=3)) == 3
    assert index.search("the cell", k=0) == []
    all_hits = index.search("cell", k=100)
    assert 3 < len(all_hits) < len(SENTENCES)  # only hits with score > 0
    assert ids(index.search("cell", k=2)) == ids(all_hits)[:2]
    with pytest.raises(ValueError):
        index.search("cell", k=-1)


def test_select_top_k_ties_and_mask():
    scores = np.array([0.0, 2.0, 1.0, 2.0, 2.0, 0.5])
    pos, sc = select_top_k(scores, 2)
    assert pos.tolist() == [1, 3] and sc.tolist() == [2.0, 2.0]
    mask = np.array([True, False, True, True, True, True])
    assert select_top_k(scores, 3, mask)[0].tolist() == [3, 4, 2]
    assert select_top_k(scores, 10)[0].tolist() == [1, 3, 4, 2, 5]  # zero score excluded
    assert select_top_k(np.zeros(0), 3)[0].size == 0


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_filters_are_applied(index, engine):
    idx = index.with_engine(engine)
    for query in QUERIES:
        for filters in ({"topic": "biology"}, {"even": True}, {"topic": "cooking", "even": False}):
            hits = idx.search(query, k=10, filters=filters)
            assert all(all(h.chunk.metadata[k] == v for k, v in filters.items()) for h in hits)
            unfiltered = [
                h
                for h in idx.search(query, k=len(SENTENCES))
                if all(h.chunk.metadata[k] == v for k, v in filters.items())
            ]
            assert ids(hits) == ids(unfiltered)[:10]
    assert idx.search("cell", filters={"topic": "astrology"}) == []
    assert idx.search("cell", filters={"missing_key": 1}) == []


# -- engines agree ---------------------------------------------------------------------


@pytest.mark.parametrize("analyzer", ["english", "plain"])
def test_both_engines_give_the_same_ranking(chunks, analyzer):
    a = BM25Index.from_chunks(chunks, engine="bm25s", analyzer=analyzer)
    b = BM25Index.from_chunks(chunks, engine="rank_bm25", analyzer=analyzer)
    compared = 0
    for query in QUERIES:
        sa, sb = a.score_all(query), b.score_all(query)
        np.testing.assert_allclose(sa, sb, rtol=1e-9, atol=1e-12)
        ha, hb = a.search(query, k=10), b.search(query, k=10)
        assert len(ha) == len(hb)
        for x, y in zip(ha, hb, strict=True):
            assert math.isclose(x.score, y.score, rel_tol=1e-9)
        # compare order among hits whose scores are distinct
        distinct_a = [
            h.chunk.id for h in ha if sum(math.isclose(h.score, o.score) for o in ha) == 1
        ]
        distinct_b = [
            h.chunk.id for h in hb if sum(math.isclose(h.score, o.score) for o in hb) == 1
        ]
        assert distinct_a == distinct_b
        assert ids(ha) == ids(hb)  # ties are broken the same way too
        compared += len(distinct_a)
    assert compared > 20


def test_lucene_variant_by_hand():
    docs = [("a", "apple banana apple", {}), ("b", "banana cherry", {}), ("c", "cherry", {})]
    k1, b = 1.2, 0.75
    n_docs, avgdl = 3, (3 + 2 + 1) / 3
    idf = math.log(1 + (n_docs - 2 + 0.5) / (2 + 0.5))  # "banana": in 2 of 3 documents
    expected = {}
    for doc_id, tf, dl in (("a", 1, 3), ("b", 1, 2)):
        expected[doc_id] = idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))
    for engine in ("bm25s", "rank_bm25"):
        idx = BM25Index.from_chunks(docs, engine=engine, analyzer="plain", k1=k1, b=b)
        got = {h.chunk.id: h.score for h in idx.search("banana")}
        assert got.keys() == expected.keys()
        for doc_id, score in expected.items():
            assert math.isclose(got[doc_id], score, rel_tol=1e-12)


# -- construction ----------------------------------------------------------------------


def test_chunks_accessor_and_rebuild(chunks, index):
    assert len(index) == len(chunks)
    assert index.chunks[0] == BM25Chunk(*chunks[0])
    replaced = [c for c in index.chunks if c.id != "doc-01"] + [
        BM25Chunk("doc-01", "Mitochondria are the powerhouse of the cell.", {"topic": "biology"})
    ]
    rebuilt = BM25Index.from_chunks(replaced)
    assert "powerhous" in rebuilt.vocabulary
    assert ids(rebuilt.search("powerhouse", k=1)) == ["doc-01"]


def test_invalid_chunks_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        BM25Index.from_chunks([("a", "x", {}), ("a", "y", {})])
    with pytest.raises(ValueError, match="non-empty string"):
        BM25Index.from_chunks([("", "x", {})])
    with pytest.raises(TypeError):
        BM25Index.from_chunks([("a", "x")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="engine"):
        BM25Index.from_chunks([("a", "x", {})], engine="lucene")  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_empty_index(tmp_path, engine):
    empty = BM25Index.from_chunks([], engine=engine)
    assert len(empty) == 0 and empty.search("anything") == []
    path = save_index(empty, tmp_path)
    assert BM25Index.load(path, engine).search("anything", filters={"a": 1}) == []
    retriever = BM25Retriever(index_path=str(path), engine=engine)
    assert retriever.invoke("anything") == []


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_corpus_of_stopwords_only(engine):
    idx = BM25Index.from_chunks([("a", "the and of", {}), ("b", "", {})], engine=engine)
    assert idx.vocabulary == () and idx.search("the") == []


# -- persistence -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_save_load_round_trip_without_reanalyzing_corpus(tmp_path, index, monkeypatch, engine):
    path = save_index(index, tmp_path)
    assert {p.name for p in path.iterdir()} >= {
        "manifest.json",
        "chunks.jsonl",
        "vocab.json",
        "token_ids.npy",
        "token_offsets.npy",
        "bm25s",
    }

    def forbidden(*args, **kwargs):
        raise AssertionError("the analyzer must not run while loading an index")

    with monkeypatch.context() as m:
        m.setattr(analysis.Analyzer, "analyze", forbidden)
        m.setattr(analysis.Analyzer, "analyze_batch", forbidden)
        m.setattr(analysis, "analyze", forbidden)
        m.setattr(analysis, "analyze_batch", forbidden)
        loaded = BM25Index.load(path, engine=engine)
        # a different k1 rebuilds the scoring stats from the stored term ids, still no analysis
        BM25Index.load(path, engine=engine, k1=1.2)

    assert loaded.engine == engine
    assert loaded.chunks == index.chunks
    assert loaded.vocabulary == index.vocabulary
    for query in QUERIES:
        for filters in (None, {"topic": "biology"}):
            before = [(h.chunk, h.score) for h in index.search(query, k=10, filters=filters)]
            after = [(h.chunk, h.score) for h in loaded.search(query, k=10, filters=filters)]
            assert [c for c, _ in before] == [c for c, _ in after]
            for (_, s1), (_, s2) in zip(before, after, strict=True):
                assert math.isclose(s1, s2, rel_tol=1e-9)
    if engine == "bm25s":  # same saved model: bit-identical scores
        assert np.array_equal(index.score_all("cell energy"), loaded.score_all("cell energy"))


def test_load_with_other_k1_changes_scores(tmp_path, index):
    path = save_index(index, tmp_path)
    default = BM25Index.load(path)
    other = BM25Index.load(path, k1=0.9, b=0.4)
    assert (other.k1, other.b) == (0.9, 0.4)
    fresh = BM25Index.from_chunks(make_chunks(), k1=0.9, b=0.4)
    np.testing.assert_allclose(other.score_all("cell energy"), fresh.score_all("cell energy"))
    assert not np.allclose(default.score_all("cell energy"), other.score_all("cell energy"))


def test_atomic_save_keeps_existing_index_on_failure(tmp_path, index, monkeypatch):
    path = save_index(index, tmp_path)
    expected = ids(BM25Index.load(path).search("cell", k=5))
    other = BM25Index.from_chunks([("z", "cell cell cell completely different", {})])

    def crash(*args, **kwargs):
        raise OSError("disk full (simulated)")

    # chunks.jsonl and vocab.json are already written when this fails
    monkeypatch.setattr(bm25_storage, "write_token_ids", crash)
    with pytest.raises(OSError, match="simulated"):
        other.save(path)
    monkeypatch.undo()

    assert ids(BM25Index.load(path).search("cell", k=5)) == expected
    assert os.listdir(tmp_path) == ["bm25"]  # staging directory cleaned up
    other.save(path)  # a later save replaces it
    assert ids(BM25Index.load(path).search("cell", k=5)) == ["z"]
    assert os.listdir(tmp_path) == ["bm25"]


def test_atomic_save_restores_old_index_if_final_rename_fails(tmp_path, index, monkeypatch):
    path = save_index(index, tmp_path)
    real_rename = os.rename

    def rename(src, dst):
        if ".tmp-" in os.fspath(src):
            raise OSError("rename failed (simulated)")
        return real_rename(src, dst)

    monkeypatch.setattr(bm25_storage.os, "rename", rename)
    with pytest.raises(OSError, match="simulated"):
        BM25Index.from_chunks([("z", "other", {})]).save(path)
    monkeypatch.undo()
    assert BM25Index.load(path).chunks == index.chunks
    assert os.listdir(tmp_path) == ["bm25"]


def test_save_refuses_to_replace_a_foreign_directory(tmp_path, index):
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("important")
    with pytest.raises(FileExistsError, match="not a BM25 index"):
        index.save(foreign)
    assert os.listdir(foreign) == ["keep.txt"]
    assert sorted(os.listdir(tmp_path)) == ["notes"]
    (tmp_path / "empty").mkdir()
    index.save(tmp_path / "empty")  # an empty directory is fine
    assert len(BM25Index.load(tmp_path / "empty")) == len(index)


def test_missing_index_error_names_path_and_ingest(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as info:
        BM25Index.load(missing)
    assert str(missing) in str(info.value)
    assert "parallel-rag ingest" in str(info.value)
    retriever = BM25Retriever(index_path=str(missing))
    with pytest.raises(FileNotFoundError, match="parallel-rag ingest"):
        retriever.invoke("cell")


# -- retriever -------------------------------------------------------------------------


@pytest.fixture
def retriever(tmp_path, index) -> BM25Retriever:
    return BM25Retriever(index_path=str(save_index(index, tmp_path)), k=4)


def test_retriever_contract(retriever, index):
    assert BM25Retriever.retrieval_kind == "lexical"
    assert retrieval_kind_of(retriever) == "lexical"
    docs = retriever.invoke("cells divide")
    assert 0 < len(docs) <= 4
    assert [d.id for d in docs] == ids(index.search("cells divide", k=4))
    scores = [d.metadata[SCORE_KEY] for d in docs]
    assert all(isinstance(s, float) and s > 0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert docs[0].metadata["topic"] == "biology"
    assert docs[0].page_content == SENTENCES[int(docs[0].id.split("-")[1])]


def test_retriever_per_call_k_and_filters(retriever):
    assert len(retriever.invoke("the cell", k=2)) == 2
    docs = retriever.invoke("cell energy light", k=10, filters={"topic": "physics"})
    assert docs and all(d.metadata["topic"] == "physics" for d in docs)
    assert retriever.invoke("xylophone") == []


def test_retriever_in_lcel_chain(retriever):
    chain = retriever | (lambda docs: [d.id for d in docs])
    assert chain.invoke("bread dough")[:2] in (["doc-20", "doc-29"], ["doc-29", "doc-20"])
    batched = chain.batch(["bread dough", "pyramids pharaohs"])
    assert batched[0] == chain.invoke("bread dough")
    assert batched[1][0] == "doc-43"
    chain2 = retriever | RunnableLambda(lambda docs: len(docs))
    assert chain2.invoke("cell") == 4


def test_retriever_batch_and_async(retriever):
    results = retriever.batch(["cells", "race", "sauce"])
    assert [len(r) > 0 for r in results] == [True, True, True]
    docs = asyncio.run(retriever.ainvoke("cell", k=1, filters={"topic": "sports"}))
    assert docs == []
    docs = asyncio.run(retriever.ainvoke("cell", k=1))
    assert len(docs) == 1


def test_retriever_loads_index_once(retriever, monkeypatch):
    calls = []
    real_load = BM25Index.load.__func__

    def counting_load(cls, *args, **kwargs):
        calls.append(args)
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(BM25Index, "load", classmethod(counting_load))
    retriever.batch(["cell"] * 8, config={"max_concurrency": 8})
    retriever.invoke("energy")
    assert len(calls) == 1
    retriever.reload()
    retriever.invoke("energy")
    assert len(calls) == 2


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_retriever_from_settings(tmp_path, index, engine):
    path = save_index(index, tmp_path)
    settings = BM25Settings(index_path=str(path), engine=engine, k1=1.2, b=0.5)
    retriever = BM25Retriever.from_settings(settings, k=3)
    assert (retriever.index_path, retriever.engine, retriever.k) == (str(path), engine, 3)
    assert (retriever.k1, retriever.b) == (1.2, 0.5)
    index_used = retriever.get_index()
    assert (index_used.engine, index_used.k1, index_used.b) == (engine, 1.2, 0.5)
    assert len(retriever.invoke("cell")) == 3
