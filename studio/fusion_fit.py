"""Fusion fitted to a corpus without labels (``parallel-rag tune``, and the end of ``ingest``).

The shipped fusion (min-max, each dense retriever weighted 0.75 against 1) was chosen on the
training collections; on another corpus other settings can retrieve better, and no single
setting is best everywhere (bench/FUSION-FIT-RESULTS.md). The fit asks the corpus itself:

1. **Pseudo-queries.** Sampled chunks (seeded) each give one passage: a sentence of the chunk,
   or, in a chunk of one long sentence, a third of its words. The passage is *taken out* of the
   chunk's text, so neither branch finds its answer by matching the query's own words or
   vector; the chunk without it is the answer (and so is any other chunk of the same file that
   holds the passage verbatim: overlapping chunks do). The query is ``QUERY_WORDS`` (6) of the
   passage's content words, in order, as people type queries: whole sentences as queries
   favour the dense branch (their neighbours paraphrase them), and on HotpotQA, where real
   questions favour BM25, they led the fit to dense weight 2 and 0.013 nDCG@10 below the
   shipped default (bench/FUSION-FIT-RESULTS.md).
2. **Branch lists as over the corpus with those chunks edited**, from the configured backends
   themselves: a lexical (``bm25``) branch is rebuilt in a scratch folder over every chunk of
   its index, the edited ones replaced (its scores depend on the whole collection); a dense
   branch searches its real store, minus the original chunks, merged by score with a scratch
   store holding only the edited chunks (a cosine score depends on the query and the chunk
   alone). Only the edited chunks are embedded; their sentences come from the stored
   sentence vectors.
3. **The grid** (``CANDIDATES``: method, dense weight, RRF ``k``) is fused offline with
   ``nodes.fuse.fuse_branches`` itself and scored by nDCG@10 over the pseudo-queries, beside
   each branch alone. The best replaces the shipped default when it beats it by ``MARGIN``, or
   when the default scores below one of its own branches alone (a margin must not keep a
   fusion that loses to a branch); otherwise the default stays.

The choice and its evidence go to ``graph.fitted_fusion.fit_path`` (JSON beside the stores),
which the graph reads (``graph.fitted_fusion.fusion_plan``). A corpus too small to fit, or a
pipeline with a store the fit cannot copy, keeps the shipped default and says why.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallel_rag.backends.base import BackendContext, ChunkBatch
from parallel_rag.backends.bm25.analysis import ENGLISH_STOPWORDS
from parallel_rag.backends.registry import collection_writer
from parallel_rag.graph.components import make_retriever
from parallel_rag.graph.configuration import PipelineConfig, RetrieverEntry
from parallel_rag.graph.fitted_fusion import (
    FIT_VERSION,
    configures_fusion,
    fit_path,
    read_fit,
    write_fit,
)
from parallel_rag.nodes.fuse import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION_METHOD,
    DEFAULT_RRF_K,
    fuse_branches,
)
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.nodes.generate.sentences import split_sentences

PSEUDO_QUERIES = 200
MIN_CHUNKS = 200  # fewer chunks: too few distractors for the ranks to say anything
MIN_QUERIES = 50  # fewer pseudo-queries: the grid's means are noise
DEPTH = 100  # candidates each branch gives a pseudo-query (the scores are normalised over them)
OUTSIDE_SPARE = 20  # hits asked of a dense store beyond DEPTH, for the edited ones among them
MARGIN = 0.01  # nDCG@10 over the pseudo-queries a setting must gain to replace the default
SEED = 0
MAX_INGEST_FIT_CHUNKS = 50_000  # above: ingest leaves the fit to `tune` (memory, time)
SPAN_WORDS = 18  # a one-sentence chunk this long gives a third of its words as the query
PUNCTUATION = ".,;:()[]\"'"
QUERY_WORDS = 6  # a query keeps this many of its content words (in order); None: all
# where each backend the fit can rebuild keeps its store: its backend_config field
SCRATCH_FIELD = {"bm25": "index_path", "qdrant_edge": "path", "qdrant": "path"}


@dataclass(frozen=True)
class Candidate:
    """One fusion setting of the grid: ``dense_weight`` for every dense retriever, 1 for the
    others; ``k`` is RRF's."""

    method: str
    dense_weight: float
    k: int = DEFAULT_RRF_K

    def weights(self, names: Sequence[str], dense: Iterable[str]) -> dict[str, float]:
        dense = set(dense)
        return {n: self.dense_weight if n in dense else 1.0 for n in names}

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "dense_weight": self.dense_weight}
        if self.method == "rrf":
            out["k"] = self.k
        return out


SHIPPED = Candidate(DEFAULT_FUSION_METHOD, DEFAULT_DENSE_WEIGHT)
DENSE_WEIGHTS = (0.25, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
CANDIDATES: tuple[Candidate, ...] = (
    *(Candidate(m, w) for m in ("minmax", "zscore", "dbsf") for w in DENSE_WEIGHTS),
    *(Candidate("rrf", w, k) for k in (10, 60) for w in (0.5, 0.75, 1.0, 1.5, 2.0)),
)


@dataclass
class PseudoQuery:
    query: str
    target: str  # the chunk id it was taken out of
    edited: str  # that chunk's text without the passage the query was made of
    passage: str = ""
    relevant: set[str] = field(default_factory=set)


@dataclass
class FitReport:
    """What a fit did: its record (as written) and where it went."""

    record: dict[str, Any]
    path: Path | None

    def summary(self) -> str:
        return describe(self.record)


def describe(record: Mapping[str, Any]) -> str:
    """One line for people: the settings chosen, or why the default stays."""
    evidence = record.get("evidence") or {}
    if record.get("status") != "fitted":
        return f"fusion: shipped default kept ({record.get('reason', 'not fitted')})"
    s = record["settings"]
    k = f", k {s['k']}" if s["method"] == "rrf" else ""
    weights = ", ".join(f"{n} {w:g}" for n, w in s["weights"].items())
    return (
        f"fusion fitted: {s['method']}{k} ({weights}); pseudo-query nDCG@10 "
        f"{evidence['chosen_score']:.3f} against {evidence['default_score']:.3f} for the shipped "
        f"default, {evidence['pseudo_queries']} pseudo-queries, {evidence['seconds']:.0f} s"
    )


# -- pseudo-queries -----------------------------------------------------------------------


def pseudo_query_of(text: str, rng: random.Random) -> tuple[str, str, str] | None:
    """(query, the passage taken out, the text without it) from one chunk, or None when it has
    nothing to take out. The query is ``QUERY_WORDS`` of the passage's content words."""
    sentences = split_sentences(text)
    usable = [s for s in sentences if 6 <= len(s.split()) <= 60 and s in text]
    if len(sentences) >= 2 and usable:
        query = rng.choice(usable)
    elif len(sentences) == 1 and len(sentences[0].split()) >= SPAN_WORDS:
        words = sentences[0].split()
        span = len(words) // 3
        start = rng.randrange(0, len(words) - span + 1)
        query = " ".join(words[start : start + span])
        if query not in text:
            return None
    else:
        return None
    taken = query
    edited = re.sub(r"[ \t]+", " ", text.replace(taken, " ", 1)).strip()
    if len(edited.split()) < 5:
        return None
    if QUERY_WORDS:
        words = [w for w in query.split() if w.lower().strip(PUNCTUATION) not in ENGLISH_STOPWORDS]
        if len(words) > QUERY_WORDS:
            keep = sorted(rng.sample(range(len(words)), QUERY_WORDS))
            words = [words[i] for i in keep]
        query = " ".join(words)
    return query, taken, edited


def pseudo_queries(
    chunks: Sequence[tuple[str, str, Mapping[str, Any]]], count: int, seed: int = SEED
) -> list[PseudoQuery]:
    """Up to ``count`` pseudo-queries from chunks ``(id, text, metadata)`` in a seeded order."""
    rng = random.Random(seed)
    by_file: dict[str, list[int]] = {}
    for position, (_, _, metadata) in enumerate(chunks):
        if metadata.get("file_id"):
            by_file.setdefault(str(metadata["file_id"]), []).append(position)
    made: list[PseudoQuery] = []
    for position in rng.sample(range(len(chunks)), len(chunks)):
        chunk_id, text, metadata = chunks[position]
        taken = pseudo_query_of(text, rng)
        if taken is None:
            continue
        query, passage, edited = taken
        siblings = by_file.get(str(metadata.get("file_id")), []) if metadata.get("file_id") else []
        relevant = {chunk_id} | {chunks[i][0] for i in siblings if passage in chunks[i][1]}
        made.append(PseudoQuery(query, chunk_id, edited, passage, relevant))
        if len(made) == count:
            break
    # one chunk is the answer of one query: a second edit of it would change the first's answer
    return made


# -- scoring the grid ---------------------------------------------------------------------

Lists = Mapping[str, Sequence[tuple[str, float]]]  # retriever -> [(id, score)] in rank order


def branch_results(lists: Lists, depth: int | None = None) -> list[dict[str, Any]]:
    """One query's branch lists as the retrieve node's branch results (cut to ``depth``)."""
    return [
        {
            "branch": f"q0:{name}",
            "view_index": 0,
            "view": "",
            "view_kind": "original",
            "retriever": name,
            "retriever_index": index,
            "status": "ok" if hits else "empty",
            "hits": [
                {"id": doc, "rank": rank, "score": score, "content": "", "metadata": {}}
                for rank, (doc, score) in enumerate(hits[:depth], start=1)
            ],
            "latency_ms": 0.0,
            "error": None,
        }
        for index, (name, hits) in enumerate(lists.items())
    ]


def ndcg_at_10(ranked: Sequence[str], relevant: Mapping[str, float]) -> float:
    """nDCG@10 with linear gains (trec_eval's, as ``ir_measures`` computes it)."""
    gains = [relevant.get(doc, 0.0) for doc in ranked[:10]]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g > 0)
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:10]
    best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best else 0.0


def fused_ids(lists: Lists, candidate: Candidate, dense: Iterable[str], top_k: int = 10):
    weights = candidate.weights(list(lists), dense)
    fused = fuse_branches(
        branch_results(lists),
        method=candidate.method,
        k=candidate.k,
        weights=weights,
        top_k=top_k,
    )
    return [d["id"] for d in fused]


def score_candidates(
    runs: Sequence[tuple[Lists, Mapping[str, float]]],
    dense: Iterable[str],
    candidates: Iterable[Candidate] = CANDIDATES,
) -> dict[Candidate, list[float]]:
    """Each candidate's nDCG@10 per query of ``runs`` ((branch lists, judgements) each)."""
    dense = frozenset(dense)
    return {
        c: [ndcg_at_10(fused_ids(lists, c, dense), rel) for lists, rel in runs] for c in candidates
    }


def single_branch_scores(
    runs: Sequence[tuple[Lists, Mapping[str, float]]], names: Iterable[str]
) -> dict[str, list[float]]:
    """Each retriever's own nDCG@10 per query of ``runs`` (its list alone, unfused)."""
    return {
        name: [ndcg_at_10([doc for doc, _ in lists.get(name, [])], rel) for lists, rel in runs]
        for name in names
    }


def choose(
    scores: Mapping[Candidate, Sequence[float]],
    margin: float = MARGIN,
    singles: Mapping[str, Sequence[float]] | None = None,
) -> Candidate:
    """The best mean, when it beats the shipped default's by ``margin``; else the default,
    unless the default scores below one of its own branches alone (``singles``): then the
    margin would lock in a fusion that loses to a branch, and the best setting is taken."""
    mean = {c: sum(v) / max(len(v), 1) for c, v in scores.items()}
    best = max(mean, key=lambda c: (mean[c], c == SHIPPED))
    shipped = mean.get(SHIPPED, -1.0)
    if mean[best] >= shipped + margin:
        return best
    best_single = max((sum(v) / max(len(v), 1) for v in (singles or {}).values()), default=-1.0)
    return best if shipped < best_single else SHIPPED


# -- branch lists over the edited corpus --------------------------------------------------


def unfittable(config: PipelineConfig) -> str | None:
    """Why the fit cannot run on ``config``'s retrievers, or None."""
    if not any(e.backend == "bm25" for e in config.retrievers):
        return "the fit reads the corpus from a bm25 retriever, and none is configured"
    for entry in config.retrievers:
        if entry.backend not in SCRATCH_FIELD:
            return f"retriever {entry.name!r} ({entry.backend}): the fit cannot copy its store"
        if entry.backend != "bm25" and not entry.is_dense:
            return f"retriever {entry.name!r} ({entry.backend}) is not dense"
        settings = entry.backend_config
        if entry.backend == "qdrant" and (settings.url or settings.location):
            return f"retriever {entry.name!r}: a Qdrant server's store is not copied"
    return None


def _scratch(entry: RetrieverEntry, folder: Path) -> RetrieverEntry:
    settings = entry.backend_config.model_copy(
        update={SCRATCH_FIELD[entry.backend]: str(folder / entry.name)}
    )
    return entry.model_copy(update={"backend_config": settings})


def _hits(retriever, query: str, k: int) -> list[tuple[str, float]]:
    from parallel_rag.backends.base import SCORE_KEY

    return [(str(d.id), float(d.metadata[SCORE_KEY])) for d in retriever.invoke(query, k=k)]


def edited_corpus_lists(
    config: PipelineConfig,
    base_dir: Path,
    chunks: Sequence[tuple[str, str, dict[str, Any]]],
    queries: Sequence[PseudoQuery],
    scratch: Path,
    depth: int = DEPTH,
) -> list[dict[str, list[tuple[str, float]]]]:
    """Every retriever's ``depth`` best ``(id, score)`` for each pseudo-query, over the corpus
    with the queries' chunks edited (see the module)."""
    from parallel_rag.studio.ingestion.chunk import Chunk
    from parallel_rag.studio.ingestion.embed import embed_chunks

    edited = {q.target: q.edited for q in queries}
    stored = config.generator.sentence_vectors
    context = BackendContext(
        scratch,
        config.embeddings.model,
        config.embeddings.device,
        GeneratorSentences(
            config.embeddings.model,
            config.embeddings.device,
            base_dir / stored if stored is not None else None,
        ),
    )
    meta = {c[0]: c[2] for c in chunks}
    targets = [Chunk(t, text, dict(meta[t])) for t, text in edited.items()]
    vectors = None
    retrievers: dict[str, tuple[Any, Any]] = {}  # name -> (scratch retriever, real or None)
    for entry in config.retrievers:
        lexical = entry.backend == "bm25"
        copy = _scratch(entry, scratch)
        writer = collection_writer(copy.backend, copy.backend_config, context)
        if lexical:
            ids = [c[0] for c in chunks]
            texts = [edited.get(c[0], c[1]) for c in chunks]
            writer.write_collection(ChunkBatch(ids, texts, [c[2] for c in chunks]))
        else:
            if vectors is None:
                vectors = embed_chunks(
                    targets, config.embeddings.model, config.embeddings.device, False
                )
            batch = ChunkBatch(
                [c.id for c in targets],
                [c.content for c in targets],
                [c.metadata for c in targets],
                vectors,
            )
            writer.write_collection(batch)
        real = None if lexical else make_retriever(entry, config, base_dir)
        retrievers[entry.name] = (make_retriever(copy, config, scratch), real)
    runs = []
    for q in queries:
        lists: dict[str, list[tuple[str, float]]] = {}
        for name, (copy, real) in retrievers.items():
            if real is None:
                lists[name] = _hits(copy, q.query, depth)
                continue
            merged = outside_hits(real, q.query, depth, edited, len(chunks)) + _hits(
                copy, q.query, depth
            )
            lists[name] = sorted(merged, key=lambda h: -h[1])[:depth]
        runs.append(lists)
    return runs


def outside_hits(
    real, query: str, depth: int, edited: Mapping[str, str], corpus: int
) -> list[tuple[str, float]]:
    """The real store's best ``depth`` hits that are not edited chunks (``corpus``: chunks in
    the store). In a corpus much larger than ``depth`` the store is asked for
    ``OUTSIDE_SPARE`` more than ``depth`` first (a query meets few of the edited chunks among
    its best), and for ``depth`` plus every edited chunk only when those were not enough: a
    search's cost grows with ``k``, and the fit makes two for every pseudo-query."""
    every = depth + len(edited)
    asked = every if corpus <= every + OUTSIDE_SPARE else depth + OUTSIDE_SPARE
    found = _hits(real, query, asked)
    outside = [h for h in found if h[0] not in edited]
    if len(outside) < depth and len(found) == asked < every:
        outside = [h for h in _hits(real, query, every) if h[0] not in edited]
    return outside[:depth]


def corpus_chunks(config: PipelineConfig, base_dir: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """Every chunk of the first bm25 retriever's index: ``(id, text, metadata)``."""
    entry = next(e for e in config.retrievers if e.backend == "bm25")
    index = make_retriever(entry, config, base_dir).term_index()
    return [(c.id, c.content, c.metadata) for c in index.chunks]


# -- the job ------------------------------------------------------------------------------


def fit_fusion(
    config: PipelineConfig,
    base_dir: Path,
    *,
    queries: int = PSEUDO_QUERIES,
    seed: int = SEED,
    write: bool = True,
) -> FitReport:
    """Fit the fusion of ``config``'s retrievers to the corpus in their stores and write the
    choice beside the stores (``write``); a corpus too small, or stores the fit cannot copy,
    keep the shipped default, and the record says why."""
    wall, cpu = time.perf_counter(), time.process_time()
    path = fit_path(config, base_dir)
    names = [e.name for e in config.retrievers]
    dense = [e.name for e in config.retrievers if e.is_dense]
    record: dict[str, Any] = {
        "version": FIT_VERSION,
        "fitted_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "retrievers": {e.name: ("dense" if e.is_dense else "lexical") for e in config.retrievers},
        "status": "default",
    }
    reason = unfittable(config)
    chunks = corpus_chunks(config, base_dir) if reason is None else []
    made = pseudo_queries(chunks, queries, seed) if reason is None else []
    if reason is None and len(chunks) < MIN_CHUNKS:
        reason = f"corpus too small to fit: {len(chunks)} chunks, fewer than {MIN_CHUNKS}"
    elif reason is None and len(made) < MIN_QUERIES:
        reason = (
            f"corpus too small to fit: {len(made)} chunks have a sentence to take out as a "
            f"pseudo-query, fewer than {MIN_QUERIES}"
        )
    if reason is not None:
        record["reason"] = reason
    else:
        with tempfile.TemporaryDirectory(prefix="parallel-rag-fit-") as scratch:
            lists = edited_corpus_lists(config, base_dir, chunks, made, Path(scratch))
        runs = [(one, dict.fromkeys(q.relevant, 1.0)) for one, q in zip(lists, made, strict=True)]
        scores = score_candidates(runs, dense)
        singles = single_branch_scores(runs, names)
        chosen = choose(scores, singles=singles)
        mean = {c: sum(v) / len(v) for c, v in scores.items()}
        single_mean = {n: round(sum(v) / len(v), 4) for n, v in singles.items()}
        ranked = sorted(mean, key=lambda c: -mean[c])
        record["status"] = "fitted"
        record["settings"] = {
            **{k: v for k, v in chosen.as_dict().items() if k != "dense_weight"},
            "weights": chosen.weights(names, dense),
        }
        if chosen == SHIPPED:
            record["note"] = f"no setting beat the shipped default by {MARGIN} nDCG@10"
        elif mean[chosen] < mean[SHIPPED] + MARGIN:
            name = max(single_mean, key=single_mean.get)
            record["note"] = (
                f"the shipped default ({mean[SHIPPED]:.4f}) lost to {name} alone "
                f"({single_mean[name]:.4f}): the best setting replaces it"
            )
        record["evidence"] = {
            "chunks": len(chunks),
            "pseudo_queries": len(made),
            "metric": "nDCG@10",
            "chosen_score": round(mean[chosen], 4),
            "default_score": round(mean[SHIPPED], 4),
            "single_branches": single_mean,
            "best": [{**c.as_dict(), "score": round(mean[c], 4)} for c in ranked[:10]],
            "examples": [{"query": q.query, "answer": q.target} for q in made[:3]],
        }
    record.setdefault("evidence", {})["seconds"] = round(time.perf_counter() - wall, 1)
    record["evidence"]["cpu_seconds"] = round(time.process_time() - cpu, 1)
    if write and path is not None:
        write_fit(path, record)
    return FitReport(record, path)


def _indexed_chunks(config: PipelineConfig, base_dir: Path) -> int:
    """Chunks in the first bm25 index, from its manifest (0 when there is none)."""
    from parallel_rag.backends.bm25.updates import stored_manifest

    entry = next((e for e in config.retrievers if e.backend == "bm25"), None)
    manifest = stored_manifest(entry.backend_config.index_dir(base_dir)) if entry else None
    return int((manifest or {}).get("num_chunks", 0))


def fit_after_ingest(config: PipelineConfig, base_dir: Path, *, changed: bool) -> str:
    """The end of an ingest: fit the fusion again when the stores ``changed`` (or were never
    fitted); a configuration that sets its fusion is not fitted. One line for the report."""
    if configures_fusion(config):
        return "fusion: set by the configuration's fusion: block (not fitted)"
    size = _indexed_chunks(config, base_dir)
    if size > MAX_INGEST_FIT_CHUNKS:
        return (
            f"fusion: not fitted at ingest ({size} chunks, over {MAX_INGEST_FIT_CHUNKS}: the fit "
            "rebuilds the lexical index in memory); parallel-rag tune fits it"
        )
    path = fit_path(config, base_dir)
    record = read_fit(path)
    if not changed and record is not None and record.get("version") == FIT_VERSION:
        return describe(record) + " (stores unchanged: kept)"
    return fit_fusion(config, base_dir).summary()


def account_line(account: Mapping[str, Any]) -> str:
    """A result's ``fusion`` account as one line (``eval``, ``tune``)."""
    k = f", k {account['k']}" if account.get("k") is not None else ""
    weights = ", ".join(f"{n} {w:g}" for n, w in account["weights"].items())
    line = f"fusion: {account['method']}{k} ({weights}), {account['source']}"
    fit = account.get("fit") or {}
    if fit:
        line += f" at {fit.get('fitted_at')} from {fit.get('pseudo_queries')} pseudo-queries"
    if account.get("note"):
        line += f"; {account['note']}"
    return line
