"""Ingest's batch writes to a saved BM25 index (``bm25_updates``): the saved index after a
replace is the one a fresh build over the kept and the new chunks gives, ranking for ranking
and score for score, and a refused write leaves the saved index as it was."""

from __future__ import annotations

import numpy as np
import pytest
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.bm25.updates import replace_files, stored_fingerprints
from test_bm25_compact_build import QUERIES, make_corpus


def corpus_in_files() -> list[tuple[str, str, dict]]:
    return [
        (chunk_id, text, {"file_id": f"f{n % 7}", "chunk_hash": f"h{n}", **meta})
        for n, (chunk_id, text, meta) in enumerate(make_corpus(300))
    ]


def terms_of(index: BM25Index) -> list[list[str]]:
    vocabulary = index.vocabulary
    return [[vocabulary[t] for t in index.chunk_term_ids(i)] for i in range(len(index.chunks))]


@pytest.mark.parametrize("engine", ["bm25s", "rank_bm25"])
def test_a_replace_saves_what_a_fresh_build_of_the_result_would(tmp_path, engine):
    corpus = corpus_in_files()
    BM25Index.from_chunks(corpus[:250], k1=1.2, b=0.7).save(tmp_path / "index")
    new = [(f"new-{i}", text, {"file_id": "f3"}) for i, text, _ in make_corpus(40, seed=9)]
    new += [(f"more-{i}", "unheard words zebra quokka", {"file_id": "g"}) for i in range(3)]
    replace_files(tmp_path / "index", ["f3", "f5"], new, k1=1.2, b=0.7)

    saved = BM25Index.load(tmp_path / "index", engine)
    kept = [c for c in corpus[:250] if c[2]["file_id"] not in {"f3", "f5"}]
    fresh = BM25Index.from_chunks(kept + new, engine=engine, k1=1.2, b=0.7)
    assert saved.chunks == fresh.chunks
    assert sorted(saved.vocabulary) == sorted(fresh.vocabulary)  # replaced-only terms gone
    assert terms_of(saved) == terms_of(fresh)
    for query in [*QUERIES, "zebra quokka"]:
        assert saved.search(query, k=20) == fresh.search(query, k=20)
        assert np.allclose(saved.score_all(query), fresh.score_all(query), rtol=0, atol=1e-6)


def test_a_chunk_kept_and_written_again_is_refused_and_nothing_changes(tmp_path):
    BM25Index.from_chunks([("a", "bridge", {"file_id": "x"})]).save(tmp_path / "index")
    before = {p.name: p.read_bytes() for p in (tmp_path / "index").iterdir() if p.is_file()}
    with pytest.raises(ValueError, match="duplicate chunk id 'a'"):
        replace_files(tmp_path / "index", ["y"], [("a", "tower", {"file_id": "y"})], k1=1.5, b=0.75)
    after = {p.name: p.read_bytes() for p in (tmp_path / "index").iterdir() if p.is_file()}
    assert after == before
    replace_files(tmp_path / "index", ["x"], [("a", "tower", {"file_id": "x"})], k1=1.5, b=0.75)
    assert [c.content for c in BM25Index.load(tmp_path / "index").chunks] == ["tower"]


def test_fingerprints_are_read_for_the_files_asked_about(tmp_path):
    corpus = corpus_in_files()
    BM25Index.from_chunks(corpus).save(tmp_path / "index")
    found = stored_fingerprints(tmp_path / "index", ["f2", "nowhere"])
    assert found == {
        (i, m["file_id"], m["chunk_hash"]) for i, _, m in corpus if m["file_id"] == "f2"
    }
