"""``parallel-rag eval``: a BEIR-layout collection indexed into the embedded defaults (BM25 and
Qdrant local mode on the packaged MiniLM) under a work directory, each retriever and the fused
graph scored with ir_measures; bad input names the option, the file or the field."""

from __future__ import annotations

import json

import pytest
import yaml
from parallel_rag.backends.encoders.embeddings import BUNDLED, embedding_identity
from parallel_rag.nodes.generate.sentence_vectors import DEFAULT_PATH as SENTENCE_VECTORS_PATH
from parallel_rag.nodes.generate.sentence_vectors import SentenceVectorStore
from parallel_rag.nodes.generate.sentences import split_sentences
from parallel_rag.studio.cli import main

pytestmark = pytest.mark.integration

CORPUS = {
    "d1": ("Forth Bridge", "The Forth Bridge is a cantilever railway bridge in Scotland."),
    "d2": ("Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889 for the World's Fair."),
    "d3": ("Bananas", "Bananas are rich in potassium and grow in tropical climates."),
    "d4": ("Ada Lovelace", "Ada Lovelace wrote the first algorithm for the Analytical Engine."),
    "d5": ("Golden Gate", "The Golden Gate Bridge opened in 1937 over the strait in California."),
}
QUERIES = {
    "q1": "Which railway bridge crosses the water in Scotland?",
    "q2": "When was the Eiffel Tower finished?",
    "q3": "Who wrote the first algorithm for a computer?",
    "q4": "an unjudged query is not evaluated",
}
QRELS = {"q1": "d1", "q2": "d2", "q3": "d4"}


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beir")
    (folder / "qrels").mkdir()
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as out:
        for doc_id, (title, text) in CORPUS.items():
            out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as out:
        for qid, text in QUERIES.items():
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    rows = "".join(f"{q}\t{d}\t1\n" for q, d in QRELS.items())
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return folder


def test_eval_prints_each_retriever_and_the_fused_graph(beir, tmp_path, capsys):
    workdir = tmp_path / "work"
    assert main(["eval", str(beir), "--workdir", str(workdir), "--quiet"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "| retriever | nDCG@10 | R@100 |"
    # the settings the fused row ran with: five documents are too few to fit
    assert lines[-1].startswith("fusion: minmax (lexical 1, dense 0.75), default; corpus too small")
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[2:-1]}
    assert list(rows) == ["lexical", "dense", "fused"]
    assert rows["fused"] == "| fused | 1.0000 | 1.0000 |"  # every judged doc first

    # every sentence the generator scores was embedded once and stored, as ingest stores them:
    # the store that indexes sentences and the fusion fit read them instead of embedding again
    store = SentenceVectorStore(workdir / SENTENCE_VECTORS_PATH, embedding_identity(BUNDLED))
    sentences = [s for t, text in CORPUS.values() for s in split_sentences(f"{t}\n{text}")]
    assert sentences and store.missing(sentences) == []
    store.close()

    marker = workdir / "eval-index.json"
    indexed_at = marker.stat().st_mtime_ns
    argv = ["eval", str(beir), "--workdir", str(workdir), "--json", "--measure", "P@1"]
    assert main([*argv, "--queries", "2"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores.pop("fusion")["source"] == "default"
    assert set(scores) == {"lexical", "dense", "fused"}
    assert all(set(row) == {"P@1"} and 0 <= row["P@1"] <= 1 for row in scores.values())
    assert scores["fused"]["P@1"] == 1.0
    assert marker.stat().st_mtime_ns == indexed_at  # same corpus and settings: index reused


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--measure", "NotAMeasure@3"], "--measure: 'NotAMeasure@3'"),
        (["--queries", "0"], "--queries: must be at least 1"),
        (["--depth", "0"], "--depth: must be between 1 and 1000"),
        (["--split", "dev"], "qrels/dev.tsv"),
    ],
)
def test_eval_refuses_bad_options_naming_them(beir, tmp_path, capsys, extra, says):
    assert main(["eval", str(beir), "--workdir", str(tmp_path / "w"), *extra]) == 1
    assert says in capsys.readouterr().err


def test_eval_of_a_missing_folder_names_the_files(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nowhere"), "--workdir", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert "evaluation data not found" in err and "nowhere/corpus.jsonl" in err


def test_eval_refuses_backends_it_cannot_index(beir, tmp_path, capsys):
    config = tmp_path / "parallel-rag.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "retrievers": [
                    {"name": "lexical", "backend": "bm25", "backend_config": {}},
                    {
                        "name": "remote",
                        "backend": "external_api",
                        "backend_config": {
                            "endpoint": "http://127.0.0.1:9/search",
                            "request_format": "elasticsearch",
                        },
                    },
                ]
            }
        )
    )
    argv = ["--config", str(config), "eval", str(beir), "--workdir", str(tmp_path / "w")]
    assert main(argv) == 1
    assert "retrievers.1.backend: eval indexes" in capsys.readouterr().err
    assert not (tmp_path / "w" / "eval-index.json").exists()
