"""The BM25 index is built from compact term-id arrays (streamed analysis, batched score
matrix) and must equal, array for array and ranking for ranking, what bm25s's own
``BM25.index`` builds from per-document id lists; the saved format does not change."""

from __future__ import annotations

import json
import random

import bm25s
import numpy as np
import pytest
from parallel_rag.backends.bm25 import scoring as bm25_scoring
from parallel_rag.backends.bm25.analysis import get_analyzer
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.scoring import bm25s_score_arrays
from parallel_rag.backends.bm25.storage import BM25S_DIR, FORMAT_VERSION, MANIFEST_FILE
from parallel_rag.backends.bm25.top_k import select_top_k

WORDS = (
    "bridge railway steel river tower paris eiffel cantilever scotland forth golden gate "
    "algorithm engine analytical lovelace potassium banana tropical climate protein cell "
    "gene expression tumour growth receptor signal pathway clinical trial patients dose"
).split()
STOPWORDS_ONLY = "the of and to in is was it"
QUERIES = [
    "railway bridge in Scotland",
    "gene expression in tumour cells",
    "clinical trial dose patients patients",
    "banana",
    "the of and",  # stopwords only: no terms
    "zzz unknown words",
]


def make_corpus(n_docs: int = 300, seed: int = 7) -> list[tuple[str, str, dict]]:
    """Documents of 0 to 60 words with repeats (term frequencies > 1), some empty and some of
    stopwords only, so every branch of the build is exercised."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        if i % 37 == 5:
            text = ""
        elif i % 41 == 3:
            text = STOPWORDS_ONLY
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))
        docs.append((f"d{i}", text, {"n": i}))
    return docs


def reference_model(index: BM25Index) -> bm25s.BM25:
    """bm25s building the Lucene index its own way: per-document lists of term ids."""
    model = bm25s.BM25(
        k1=index.k1,
        b=index.b,
        method="lucene",
        idf_method="lucene",
        dtype="float64",
        backend="numpy",
        csc_backend="numpy",
    )
    lists = [index.chunk_term_ids(i).tolist() for i in range(len(index))]
    vocab = {term: i for i, term in enumerate(index.vocabulary)}
    model.index((lists, vocab), create_empty_token=False, show_progress=False)
    return model


def assert_same_matrix(actual: dict, expected: dict) -> None:
    assert actual["num_docs"] == expected["num_docs"]
    for key in ("data", "indices", "indptr"):
        assert actual[key].dtype == expected[key].dtype, key
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.0), (0.6, 1.0)])
@pytest.mark.parametrize("batch_tokens", [1, 97, 1 << 21])
def test_score_matrix_equals_bm25s_own_build(monkeypatch, k1, b, batch_tokens):
    monkeypatch.setattr(bm25_scoring, "_BUILD_BATCH_TOKENS", batch_tokens)
    index = BM25Index.from_chunks(make_corpus(), k1=k1, b=b)
    reference = reference_model(index)
    built = index.with_engine("bm25s", k1=k1, b=b)  # the same model, reused
    matrix = bm25s_score_arrays(
        np.concatenate([index.chunk_term_ids(i) for i in range(len(index))]),
        np.cumsum([0] + [index.chunk_term_ids(i).size for i in range(len(index))]),
        len(index.vocabulary),
        k1,
        b,
    )
    assert_same_matrix(matrix, reference.scores)
    for query in QUERIES:
        term_ids = [index.vocabulary.index(t) for t in index.query_terms(query)]
        expected = reference.get_scores_from_ids(term_ids) if term_ids else np.zeros(len(index))
        np.testing.assert_array_equal(built.score_all(query), expected)
        positions, scores = select_top_k(expected, 50)
        hits = built.search(query, k=50)
        assert [h.position for h in hits] == positions.tolist()
        assert [h.score for h in hits] == scores.tolist()


def test_term_ids_are_the_analyzed_terms_in_first_seen_order():
    corpus = make_corpus(60)
    index = BM25Index.from_chunks(corpus)
    analyzer = get_analyzer(index.analyzer)
    first_seen: dict[str, int] = {}
    for position, (_, text, _) in enumerate(corpus):
        terms = analyzer.analyze(text)
        for term in terms:
            first_seen.setdefault(term, len(first_seen))
        stored = index.chunk_term_ids(position)
        assert stored.dtype == np.int32
        assert [index.vocabulary[t] for t in stored.tolist()] == terms
    assert list(index.vocabulary) == list(first_seen)


def test_rank_bm25_engine_ranks_like_the_compact_bm25s_build():
    index = BM25Index.from_chunks(make_corpus())
    slow = index.with_engine("rank_bm25")
    for query in QUERIES:
        fast_hits = [h.position for h in index.search(query, k=30)]
        assert fast_hits == [h.position for h in slow.search(query, k=30)]
        np.testing.assert_allclose(index.score_all(query), slow.score_all(query), rtol=1e-12)


def test_saved_format_is_unchanged_and_bm25s_loads_it(tmp_path):
    index = BM25Index.from_chunks(make_corpus())
    target = tmp_path / "bm25"
    index.save(target)
    manifest = json.loads((target / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert manifest["format_version"] == FORMAT_VERSION == 1
    plain = bm25s.BM25.load(target / BM25S_DIR, load_corpus=False, mmap=False)
    assert type(plain) is bm25s.BM25
    assert_same_matrix(plain.scores, reference_model(index).scores)
    assert plain.vocab_dict == {t: i for i, t in enumerate(index.vocabulary)}
    loaded = BM25Index.load(target)
    for query in QUERIES:
        assert loaded.search(query, k=20) == index.search(query, k=20)


def test_an_index_saved_by_bm25s_own_build_loads_and_ranks_the_same(tmp_path):
    """An index written before the compact build (bm25s model from per-document lists) is
    read as it is: no format change, same rankings."""
    index = BM25Index.from_chunks(make_corpus())
    target = tmp_path / "bm25"
    index.save(target)
    reference_model(index).save(target / BM25S_DIR, show_progress=False)  # overwrite model
    loaded = BM25Index.load(target)
    for query in QUERIES:
        assert loaded.search(query, k=20) == index.search(query, k=20)


def test_other_k1_on_load_rebuilds_from_the_stored_arrays(tmp_path):
    index = BM25Index.from_chunks(make_corpus())
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", k1=0.9, b=0.3)
    expected = BM25Index.from_chunks(make_corpus(), k1=0.9, b=0.3)
    for query in QUERIES:
        np.testing.assert_array_equal(loaded.score_all(query), expected.score_all(query))


def reference_top_k(scores: np.ndarray, k: int, mask: np.ndarray | None):
    """The definition: valid = score > 0 (and mask), best score first, lower position first."""
    valid = [i for i, s in enumerate(scores.tolist()) if s > 0 and (mask is None or mask[i])]
    ranked = sorted(valid, key=lambda i: (-scores[i], i))[:k]
    return ranked, [float(scores[i]) for i in ranked]


@pytest.mark.parametrize("n", [7, 5_000, 200_003])
@pytest.mark.parametrize("k", [1, 10, 100])
@pytest.mark.parametrize("shape", ["flat", "ties", "sparse", "masked"])
def test_select_top_k_matches_the_definition_on_large_arrays(n, k, shape):
    rng = np.random.default_rng(n * 31 + k)
    mask = None
    if shape == "ties":  # few distinct values: many ties around the k-th best
        scores = rng.integers(0, 4, n).astype(np.float64)
    elif shape == "sparse":  # fewer valid scores than k in most blocks
        scores = np.zeros(n)
        hits = rng.choice(n, size=min(n, k // 2 + 1), replace=False)
        scores[hits] = rng.random(hits.size) + 0.1
    else:
        scores = rng.gamma(2.0, 1.0, n) * (rng.random(n) < 0.5)
        if shape == "masked":
            mask = rng.random(n) < 0.3
            scores[np.argmax(scores)] += 100.0  # the best score is often masked out
    positions, selected = select_top_k(scores, k, mask)
    expected_positions, expected_scores = reference_top_k(scores, k, mask)
    assert positions.tolist() == expected_positions
    assert selected.tolist() == expected_scores
