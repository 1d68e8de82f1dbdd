"""The fusion fit end to end on a small real corpus (HotpotQA paragraphs, embedded defaults):
``ingest`` fits it and says so, ``ask --json`` reports the fitted settings in the result's
``fusion``, ``tune`` fits again on demand, and ``eval`` prints the settings its fused row ran
with. Skipped without the shared evaluation data."""

from __future__ import annotations

import json

import pytest
from parallel_rag.studio.cli import main
from real_fixtures import SHARED_DATA

pytestmark = pytest.mark.integration

HOTPOTQA = SHARED_DATA / "hotpotqa-dev500"
DOCUMENTS = 220
"""Over the fit's ``MIN_CHUNKS`` (200): ``eval`` indexes one unit per document, and ingest cuts
a Wikipedia paragraph into one chunk (or two). Short paragraphs on purpose: the fit embeds
every chunk it edits and their sentences, and a SciFact abstract costs about four paragraphs."""
QUERIES = 20
SHORT = (250, 400)
"""Characters of a paragraph filling the corpus up (the judged ones are taken whatever their
length): two or three sentences, a pseudo-query's sentence and the rest of its chunk, at about
half the embedding of an average HotpotQA paragraph (540 characters)."""


@pytest.fixture(scope="module")
def hotpot_slice(tmp_path_factory):
    """The documents judged for the first test queries, filled up with short others to
    ``DOCUMENTS``: as a JSONL file to ingest and as a BEIR folder to evaluate."""
    if not (HOTPOTQA / "corpus.jsonl").is_file():
        pytest.skip(f"evaluation data not found: {HOTPOTQA}")
    rows = [r.split("\t") for r in (HOTPOTQA / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qrels: dict[str, dict[str, str]] = {}
    for qid, doc, score in rows:
        if len(qrels) < QUERIES or qid in qrels:
            qrels.setdefault(qid, {})[doc] = score
    wanted = {doc for docs in qrels.values() for doc in docs}
    corpus = {}
    with open(HOTPOTQA / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            others = len(corpus) - len(wanted & corpus.keys())
            short = SHORT[0] <= len(record["text"]) <= SHORT[1]
            if record["_id"] in wanted or (short and others < DOCUMENTS - len(wanted)):
                corpus[record["_id"]] = record
    folder = tmp_path_factory.mktemp("hotpot-slice")
    (folder / "qrels").mkdir()
    lines = [json.dumps(r) for r in corpus.values()]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs = [{"id": r["_id"], "title": r["title"], "text": r["text"]} for r in corpus.values()]
    ingest = folder / "ingest"
    ingest.mkdir()
    (ingest / "paragraphs.jsonl").write_text("\n".join(map(json.dumps, docs)) + "\n")
    with open(HOTPOTQA / "queries.jsonl", encoding="utf-8") as handle:
        queries = [json.loads(line) for line in handle]
    kept = [q for q in queries if q["_id"] in qrels]
    (folder / "queries.jsonl").write_text("\n".join(map(json.dumps, kept)) + "\n")
    judged = "".join(f"{q}\t{d}\t{s}\n" for q, docs in qrels.items() for d, s in docs.items())
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + judged)
    return folder, kept


def test_ingest_fits_and_the_result_and_tune_show_it(hotpot_slice, tmp_path, monkeypatch, capsys):
    folder, queries = hotpot_slice
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", str(folder / "ingest"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "fusion fitted:" in out and "pseudo-queries" in out, out
    record = json.loads((tmp_path / ".parallel-rag" / "fusion-fit.json").read_text())
    assert record["status"] == "fitted" and record["evidence"]["pseudo_queries"] >= 50
    # each branch alone was scored, and a default below one of them was not kept
    evidence = record["evidence"]
    assert set(evidence["single_branches"]) == set(record["retrievers"])
    if evidence["default_score"] < max(evidence["single_branches"].values()):
        assert evidence["chosen_score"] == evidence["best"][0]["score"]  # the best is taken

    assert main(["ask", queries[0]["text"], "--json"]) == 0
    fusion = json.loads(capsys.readouterr().out)["fusion"]
    assert fusion["source"] == "fitted"
    assert fusion["method"] == record["settings"]["method"]
    assert fusion["weights"] == record["settings"]["weights"]
    assert fusion["fit"]["fitted_at"] == record["fitted_at"]

    assert main(["tune", "--json", "--queries", "60", "--seed", "1"]) == 0
    tuned = json.loads(capsys.readouterr().out)
    assert tuned["evidence"]["pseudo_queries"] == 60 and tuned["status"] == "fitted"
    assert json.loads((tmp_path / ".parallel-rag" / "fusion-fit.json").read_text()) == {
        k: v for k, v in tuned.items() if k != "path"
    }


def test_eval_fits_the_collection_and_prints_the_settings_of_its_fused_row(
    hotpot_slice, tmp_path, capsys
):
    folder, _ = hotpot_slice
    argv = ["eval", str(folder), "--workdir", str(tmp_path / "work"), "--quiet"]
    assert main([*argv, "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["fusion"]["source"] == "fitted"
    assert scores["fusion"]["fit"]["pseudo_queries"] >= 50
    assert 0 < scores["fused"]["nDCG@10"] <= 1
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("fusion: ")
