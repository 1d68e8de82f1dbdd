"""The demo answers the example questions: the example corpus ingested with the embedded
defaults (packaged MiniLM, Qdrant local mode, BM25 on disk), each question of
``examples/questions.jsonl`` asked through the default graph (extractive generator); the answer
holds the question's expected ``answer`` phrase, and the citation closing that phrase names the
document it comes from; for a question flagged ``opens_answer`` (the demo question) the phrase
is in the answer's first cited run of sentences. Every question must pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

QUESTIONS = [
    json.loads(line)
    for line in (Path(__file__).resolve().parents[2] / "examples" / "questions.jsonl")
    .read_text(encoding="utf-8")
    .splitlines()
    if line.strip()
]


def _source_is(doc: dict, gold_source: str) -> bool:
    source = str(doc["metadata"].get("source", "")).replace(os.sep, "/")
    return source == gold_source or source.endswith("/" + gold_source)


def _closing_citation(answer: str, at: int, citations: list[dict]) -> dict | None:
    """The citation that closes the sentence at ``at``: the first one written after it."""
    after = [(answer.find(f"[{c['number']}]", at), c) for c in citations]
    after = [(where, c) for where, c in after if where >= 0]
    return min(after, key=lambda item: item[0])[1] if after else None


def test_every_example_question_has_an_answer_phrase():
    assert len(QUESTIONS) >= 13
    for question in QUESTIONS:
        assert question.get("answer", "").strip(), question["id"]


@pytest.mark.parametrize("question", [pytest.param(q, id=q["id"]) for q in QUESTIONS])
def test_the_demo_answers_the_example_question_with_its_phrase(example_graph, question):
    result = example_graph.invoke({"query": question["question"]})
    answer = result["answer"]
    at = answer.lower().find(question["answer"].lower())
    assert at >= 0, f"{question['answer']!r} not in: {answer}"
    documents = {n: doc for n, doc in enumerate(result["documents"], start=1)}
    closing = _closing_citation(answer, at, result["citations"])
    assert closing is not None, answer
    assert _source_is(documents[closing["number"]], question["gold_source"]), (
        documents[closing["number"]]["metadata"].get("source"),
        answer,
    )
    if question.get("opens_answer"):  # no other document's citation comes before the phrase
        first = min(answer.find(f"[{c['number']}]") for c in result["citations"])
        assert answer.find(f"[{closing['number']}]") == first, answer
