"""How the bench scores what it measured: ranked runs (``{query id: [doc ids]}``) against the
SciFact/Vaswani judgements or HotpotQA's supporting paragraphs, and answers against HotpotQA's
gold answer strings and supporting paragraphs.

One owner for each measure, shared by the quality section, the fusion and query expansion
studies, the answer harness and the generation latency study.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from bench.data import doc_text


def scifact_measures(runs: dict[str, list[str]], qrels) -> dict[str, float]:
    """nDCG@10 and R@100 against graded judgements (SciFact, Vaswani)."""
    from parallel_rag.studio.evaluation import score_runs

    return score_runs(runs, qrels, ["nDCG@10", "R@100"])


def hotpot_measures(runs: dict[str, list[str]], questions: list[dict]) -> dict[str, float]:
    """R@10, R@100 and AllSupport@10/@20 (every supporting paragraph in the top k)."""
    n = max(len(questions), 1)
    recall10 = recall100 = all10 = all20 = all100 = 0.0
    for q in questions:
        ranked = runs.get(q["_id"], [])
        gold = set(q["supporting_doc_ids"])
        recall10 += len(gold & set(ranked[:10])) / len(gold)
        recall100 += len(gold & set(ranked[:100])) / len(gold)
        all10 += gold <= set(ranked[:10])
        all20 += gold <= set(ranked[:20])
        all100 += gold <= set(ranked[:100])
    return {
        "R@10": recall10 / n,
        "AllSupport@10": all10 / n,
        "AllSupport@20": all20 / n,
        "R@100": recall100 / n,
    }


def hotpot_metrics(
    runs: dict[str, list[str]], questions: list[dict], corpus: dict[str, dict[str, str]]
) -> dict[str, float]:
    """R@10 and AllSupport@10/@20 over every question; answer-in-top-10 over the questions
    whose answer is not yes/no (a yes/no answer is not a span of any paragraph)."""
    recall, all10, all20, answer, answerable = 0.0, 0, 0, 0, 0
    for q in questions:
        ranked = runs.get(q["_id"], [])
        gold = set(q["supporting_doc_ids"])
        recall += len(gold & set(ranked[:10])) / len(gold)
        all10 += gold <= set(ranked[:10])
        all20 += gold <= set(ranked[:20])
        answers = [a.lower() for a in q.get("answers", []) if a.lower() not in ("yes", "no")]
        if answers:
            answerable += 1
            texts = [doc_text(corpus[d]).lower() for d in ranked[:10] if d in corpus]
            answer += any(a in t for a in answers for t in texts)
    n = max(len(questions), 1)
    return {
        "R@10": recall / n,
        "AllSupport@10": all10 / n,
        "AllSupport@20": all20 / n,
        "Answer@10": answer / max(answerable, 1),
        "answerable": answerable,
    }


YES_NO = ("yes", "no")

_CITATION_MARK = re.compile(r"\s*\[\d{1,3}(?:\s*[,;]\s*\d{1,3})*\]")


def gold_answers(question: dict) -> list[str]:
    """The question's gold answer strings, lower-cased; empty for a yes/no question."""
    return [a.lower() for a in question.get("answers", []) if a.lower() not in YES_NO and a]


def answer_words(answer: str) -> int:
    """An answer's length in words, citation marks left out."""
    return len(_CITATION_MARK.sub("", answer).split())


def score(rows: list[dict], questions: dict[str, dict], corpus: dict) -> dict[str, Any]:
    """Answer recall, ceiling, citation support/precision and median length of one run.

    ``rows``: ``{"id", "answer", "cited"}`` with ``cited`` the corpus ids of the cited
    documents and ``"retrieved"`` the fused documents' corpus ids."""
    recall = first = ceiling = answerable = supported = citing = cited_total = cited_gold = 0
    lengths = []
    for row in rows:
        question = questions[row["id"]]
        gold_docs = set(question["supporting_doc_ids"])
        answers = gold_answers(question)
        text = row["answer"].lower()
        if answers:
            answerable += 1
            recall += any(a in text for a in answers)
            mark = _CITATION_MARK.search(text)
            opening = text[: mark.start()] if mark else text
            first += any(a in opening for a in answers)
            texts = [doc_text(corpus[d]).lower() for d in row["retrieved"] if d in corpus]
            ceiling += any(a in t for a in answers for t in texts)
        if row["cited"]:
            citing += 1
            supported += bool(gold_docs & set(row["cited"]))
            cited_total += len(row["cited"])
            cited_gold += len(gold_docs & set(row["cited"]))
        lengths.append(answer_words(row["answer"]))
    return {
        "questions": len(rows),
        "answerable": answerable,
        "recall": recall / max(answerable, 1),
        "answer_first": first / max(answerable, 1),
        "ceiling": ceiling / max(answerable, 1),
        "of_ceiling": recall / max(ceiling, 1),
        "citation_support": supported / max(citing, 1),
        "citation_precision": cited_gold / max(cited_total, 1),
        "median_words": statistics.median(lengths) if lengths else 0,
        "mean_words": statistics.fmean(lengths) if lengths else 0,
    }
