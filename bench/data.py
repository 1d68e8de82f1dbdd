"""Where the evaluation collections are, how they are read, their smoke-sized slices, and the
synthetic scale corpus.

The collections live in ``../shared/data`` beside the checkout (override: ``$PARALLEL_RAG_DATA``)
and are never copied into the repo. A missing folder stops the harness with a clear message.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_ENV = "PARALLEL_RAG_DATA"
SCIFACT = "scifact"
HOTPOTQA = "hotpotqa-dev500"
VASWANI = "vaswani"


class DataMissing(RuntimeError):
    """Raised (as a clean exit) when a collection the harness needs is absent."""


def data_root() -> Path:
    return Path(os.environ.get(DATA_ENV) or REPO_ROOT.parent / "shared" / "data").resolve()


def require(folder: str, files: list[str]) -> Path:
    root = data_root() / folder
    missing = [name for name in files if not (root / name).is_file()]
    if missing:
        raise DataMissing(
            f"bench: evaluation data not found: {root} lacks {', '.join(missing)}.\n"
            f"The harness reads the BEIR collections from {data_root()} (set ${DATA_ENV} to "
            "another folder holding scifact/ and hotpotqa-dev500/). Nothing was measured."
        )
    return root


def doc_text(doc: dict[str, str]) -> str:
    """The text a document is indexed (and embedded) as, as ``studio.evaluation`` does it."""
    return f"{doc['title']}\n{doc['text']}".strip()


def sentence_fingerprint(corpus: dict[str, dict[str, str]]) -> str:
    """A digest of the corpus cut into sentences as ingest cuts it: part of a cached index's
    signature, so an index built before the sentence splitter changed is built again."""
    import hashlib

    from parallel_rag.nodes.generate.sentences import split_sentences

    digest = hashlib.sha256()
    for doc_id in sorted(corpus):
        for sentence in split_sentences(doc_text(corpus[doc_id])):
            digest.update(sentence.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def load_scifact(split: str):
    """SciFact as a ``studio.evaluation.BeirCollection`` (queries judged in ``split``)."""
    from parallel_rag.studio.evaluation import MissingDatasetError, load_beir

    root = require(SCIFACT, ["corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"])
    try:
        return load_beir(root, split=split)
    except MissingDatasetError as error:  # pragma: no cover - checked above
        raise DataMissing(f"bench: {error}") from None


def load_vaswani():
    """Vaswani as a ``studio.evaluation.BeirCollection``: a collection no setting was tuned on
    (every judged query)."""
    from parallel_rag.studio.evaluation import MissingDatasetError, load_beir

    root = require(VASWANI, ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
    try:
        return load_beir(root, split="test")
    except MissingDatasetError as error:  # pragma: no cover - checked above
        raise DataMissing(f"bench: {error}") from None


@dataclass
class HotpotQA:
    corpus: dict[str, dict[str, str]]
    questions: list[dict] = field(default_factory=list)  # qa.jsonl order

    def split(self, tune: int) -> tuple[list[dict], list[dict]]:
        """First ``tune`` questions for tuning, the rest for reporting."""
        return self.questions[:tune], self.questions[tune:]


def load_hotpotqa() -> HotpotQA:
    root = require(HOTPOTQA, ["corpus.jsonl", "qa.jsonl"])
    corpus = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            corpus[str(record["_id"])] = {"title": record.get("title", ""), "text": record["text"]}
    questions = []
    with open(root / "qa.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                questions.append(json.loads(line))
    return HotpotQA(corpus, questions)


# -- synthetic scale corpus ---------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


def sentences_of(texts: list[str]) -> list[str]:
    out: list[str] = []
    for text in texts:
        out.extend(s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > 20)
    return out


def synthetic_corpus(
    source_texts: list[str], n_docs: int, seed: int = 0, sentences_per_doc: tuple = (3, 9)
) -> list[tuple[str, str, dict]]:
    """``n_docs`` documents, each a random draw of 3 to 8 sentences from the whole SciFact
    corpus (sentence split on ``. ``/``? ``/``! `` before a capital or digit), joined in draw
    order. Lengths and vocabulary match SciFact abstracts; topics are mixed, so every query
    matches many documents a little (a harder, flatter score distribution than real data)."""
    pool = sentences_of(source_texts)
    rng = np.random.default_rng(seed)
    counts = rng.integers(sentences_per_doc[0], sentences_per_doc[1], size=n_docs)
    picks = rng.integers(0, len(pool), size=int(counts.sum()))
    docs = []
    offset = 0
    for i, count in enumerate(counts.tolist()):
        text = " ".join(pool[p] for p in picks[offset : offset + count].tolist())
        offset += count
        docs.append((f"syn{i:07d}", text, {"doc_id": f"syn{i:07d}"}))
    return docs


def random_unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Random directions (float32, unit length): stand-ins for embeddings in store scale tests."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


# -- smoke-sized slices (``--smoke`` runs) ---------------------------------------------------


def _subset(collection, qids: list[str], corpus_ids: set[str]):
    from parallel_rag.studio.evaluation import BeirCollection

    return BeirCollection(
        corpus={k: v for k, v in collection.corpus.items() if k in corpus_ids},
        queries={q: collection.queries[q] for q in qids},
        qrels={q: collection.qrels[q] for q in qids},
    )


def smoke_scifact(test, train, queries: int = 8, distractors: int = 30):
    """The first queries of each split with their judged documents and seeded distractors: a
    collection small enough for CI in which every measure still has something to find."""
    test_q, train_q = list(test.queries)[:queries], list(train.queries)[:queries]
    judged = {d for q in test_q for d in test.qrels[q]} | {
        d for q in train_q for d in train.qrels[q]
    }
    others = sorted(set(test.corpus) - judged)
    keep = judged | set(random.Random(7).sample(others, distractors))
    return _subset(test, test_q, keep), _subset(train, train_q, keep)


def smoke_hotpotqa(data: HotpotQA, questions: int = 12) -> HotpotQA:
    """The first questions and the paragraphs of their contexts."""
    picked = data.questions[:questions]
    ids = {d for q in picked for d in q["context_doc_ids"]}
    return HotpotQA({k: v for k, v in data.corpus.items() if k in ids}, picked)
