"""Retrieval evaluation on BEIR-layout collections (corpus.jsonl, queries.jsonl, qrels/*.tsv).

Indexes a corpus one document per unit into the configured BM25 and Qdrant (local, server or
Edge) indexes (ids shared across indexes), then scores each single retriever and the fused
graph with ``ir_measures``. Used by ``parallel-rag eval``, the quality tests and ``bench/``.

The fused list comes from the retrieval graph only (rewrite -> retrieve -> rerank -> fuse,
through ``ParallelFusionRetriever``, which runs the retrieval graph ``build_graph`` compiled
beside the answer graph): generation is not part of the run, and the ranking is the
``documents`` a whole graph run returns.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parallel_rag.backends.base import BackendContext, ChunkBatch
from parallel_rag.backends.registry import collection_writer, evaluable_backends
from parallel_rag.graph.components import make_retriever
from parallel_rag.graph.configuration import ConfigError, PipelineConfig
from parallel_rag.graph.state import MAX_TOP_K
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.studio.ingestion.chunk import Chunk
from parallel_rag.studio.ingestion.embed import embed_chunks, store_sentence_vectors

BEIR_NAMESPACE = uuid.UUID("0c7d3f5e-8a61-4b3a-9f2e-2b6f6c1d9e47")
DOC_ID_KEY = "doc_id"


class MissingDatasetError(FileNotFoundError):
    """The evaluation collection is not where it was looked for."""


@dataclass
class BeirCollection:
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: str | Path, split: str = "test") -> BeirCollection:
    """Read a BEIR folder; only queries judged in ``split`` are kept."""
    root = Path(folder)
    needed = [root / "corpus.jsonl", root / "queries.jsonl", root / "qrels" / f"{split}.tsv"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise MissingDatasetError(f"evaluation data not found: {', '.join(missing)}")
    corpus = {}
    with open(needed[0], encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            corpus[str(record["_id"])] = {"title": record.get("title", ""), "text": record["text"]}
    qrels: dict[str, dict[str, int]] = {}
    with open(needed[2], encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    queries = {}
    with open(needed[1], encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if str(record["_id"]) in qrels:
                queries[str(record["_id"])] = record["text"]
    return BeirCollection(corpus, queries, qrels)


def unit_id(doc_id: str) -> str:
    """The shared index id of a corpus document (UUID, as Qdrant requires)."""
    return str(uuid.uuid5(BEIR_NAMESPACE, doc_id))


def corpus_chunks(corpus: dict[str, dict[str, str]]) -> list[Chunk]:
    return [
        Chunk(
            unit_id(doc_id),
            f"{doc['title']}\n{doc['text']}".strip(),
            # the title as ingest gives a JSONL record's: BM25 weights a leading title line
            {DOC_ID_KEY: doc_id, "source": doc_id, **({"title": t} if (t := doc["title"]) else {})},
        )
        for doc_id, doc in corpus.items()
    ]


def index_corpus(
    corpus: dict[str, dict[str, str]], config: PipelineConfig, base_dir: Path, progress=False
) -> None:
    """Write the corpus, one unit per document, into every index of ``config`` an evaluation
    can write (``evaluable_backends``; the others are left alone), embedded once for those
    that need vectors.

    The generator's sentences are embedded once and stored under ``base_dir``, as ingest's
    embed stage stores them (``store_sentence_vectors``), so a store that indexes sentences
    and the fusion fit afterwards (``studio/fusion_fit.py``: the sentences of the chunks it
    edits) read them instead of embedding them again."""
    chunks = corpus_chunks(corpus)
    embeddings = config.embeddings
    stored = config.generator.sentence_vectors
    sentences = GeneratorSentences(
        embeddings.model, embeddings.device, base_dir / stored if stored is not None else None
    )
    context = BackendContext(base_dir, embeddings.model, embeddings.device, sentences)
    entries = [e for e in config.retrievers if e.backend in evaluable_backends()]
    writers = [collection_writer(e.backend, e.backend_config, context) for e in entries]
    vectors = None
    if any(writer.needs_vectors for writer in writers):
        vectors = embed_chunks(chunks, embeddings.model, embeddings.device, progress)
    # a sentence that is a whole unit takes the unit's vector (ingest passes the same)
    known = (
        {c.content: row for c, row in zip(chunks, vectors, strict=True)}
        if vectors is not None
        else None
    )
    store_sentence_vectors(chunks, config, base_dir, progress, known)
    for writer in writers:
        batch = ChunkBatch(
            ids=[c.id for c in chunks],
            texts=[c.content for c in chunks],
            metadatas=[c.metadata for c in chunks],
            vectors=vectors if writer.needs_vectors else None,
        )
        writer.write_collection(batch)


def ranked_doc_ids(items: Iterable[Any]) -> list[str]:
    """Corpus ids from retriever ``Document``s or fused result documents, in order."""
    ids = []
    for item in items:
        metadata = item["metadata"] if isinstance(item, dict) else item.metadata
        ids.append(str(metadata[DOC_ID_KEY]))
    return ids


def run_retriever(retriever, queries: dict[str, str], k: int) -> dict[str, list[str]]:
    return {qid: ranked_doc_ids(retriever.invoke(text, k=k)) for qid, text in queries.items()}


def run_graph(graph, queries: dict[str, str], k: int, batch_size: int = 8) -> dict[str, list[str]]:
    """Each query's fused ranking (``k`` documents, at most the graph's ``MAX_TOP_K``) from
    the retrieval graph alone (``ParallelFusionRetriever`` runs it; no ``generate`` node),
    so no answer is generated. ``batch_size`` queries run at a time."""
    from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever

    retriever = ParallelFusionRetriever(graph=graph, top_k=min(k, MAX_TOP_K))
    qids = list(queries)
    fused = retriever.batch([queries[q] for q in qids], config={"max_concurrency": batch_size})
    return {qid: ranked_doc_ids(documents) for qid, documents in zip(qids, fused, strict=True)}


def score_runs(
    runs: dict[str, list[str]], qrels: dict[str, dict[str, int]], measures: Iterable[str]
) -> dict[str, float]:
    """Mean of each measure (e.g. 'nDCG@10', 'R@100') over the judged queries."""
    import ir_measures

    parsed = [ir_measures.parse_measure(m) for m in measures]
    run = {
        qid: {doc: float(len(ids) - i) for i, doc in enumerate(ids)} for qid, ids in runs.items()
    }
    aggregated = ir_measures.calc_aggregate(parsed, qrels, run)
    return {str(m): float(aggregated[m]) for m in parsed}


def single_retrievers(config: PipelineConfig, base_dir: Path) -> dict[str, Any]:
    """Each configured retriever on its own, as its backend builds it."""
    return {entry.name: make_retriever(entry, config, base_dir) for entry in config.retrievers}


def evaluate(
    folder: str | Path,
    config: PipelineConfig,
    workdir: Path,
    *,
    split: str = "test",
    max_queries: int | None = None,
    measures: Iterable[str] = ("nDCG@10", "R@100"),
    depth: int = 100,
    progress: bool = False,
    fit: bool = True,
) -> dict[str, dict[str, float]]:
    """Index a BEIR collection into ``workdir`` with the config's bm25 and qdrant retrievers,
    then score each retriever alone and the fused retrieval graph (no generation):
    ``{name: {measure: mean}}``.

    The indexes live under ``workdir`` (never the config's own), and are reused while the
    corpus and the retriever settings are unchanged (``eval-index.json`` records both). With
    ``fit``, the fusion is fitted to the corpus as an ingest fits it (from the corpus alone,
    never the queries or judgements; ``studio/fusion_fit.py``), so the fused row is what a user
    who ingested this corpus gets; ``fusion_account`` says which settings fused it.
    """
    from parallel_rag.graph.builder import build_retrieval_graph

    for position, entry in enumerate(config.retrievers):
        if entry.backend not in evaluable_backends():
            raise ConfigError(
                f"retrievers.{position}.backend: eval indexes the collection into "
                f"{', '.join(evaluable_backends())} retrievers only, not {entry.backend!r} "
                f"({entry.name})"
            )
    measures = list(measures)
    for measure in measures:
        _parse_measure(measure)
    collection = load_beir(folder, split)
    qids = sorted(collection.queries)[: max_queries or None]
    queries = {qid: collection.queries[qid] for qid in qids}
    qrels = {qid: collection.qrels[qid] for qid in qids}
    workdir.mkdir(parents=True, exist_ok=True)
    fingerprint = {
        "corpus": str(Path(folder).resolve()),
        "documents": len(collection.corpus),
        "retrievers": [e.model_dump(mode="json") for e in config.retrievers],
        "embeddings": config.embeddings.model_dump(mode="json"),
    }
    marker = workdir / "eval-index.json"
    indexed = False
    if not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != fingerprint:
        marker.unlink(missing_ok=True)
        index_corpus(collection.corpus, config, workdir, progress=progress)
        marker.write_text(json.dumps(fingerprint, indent=2), encoding="utf-8")
        indexed = True
    if fit:  # as ingest does: the fusion fitted to this corpus, from the corpus alone
        from parallel_rag.studio.fusion_fit import fit_after_ingest

        fit_after_ingest(config, workdir, changed=indexed)
    scores: dict[str, dict[str, float]] = {}
    for name, retriever in single_retrievers(config, workdir).items():
        scores[name] = score_runs(run_retriever(retriever, queries, depth), qrels, measures)
    graph = build_retrieval_graph(config, base_dir=workdir)  # no generator is even built
    scores["fused"] = score_runs(run_graph(graph, queries, depth), qrels, measures)
    return scores


def fusion_account(config: PipelineConfig, workdir: Path) -> dict[str, Any]:
    """The fusion ``evaluate``'s fused row ran with (``graph.fitted_fusion.current_plan``)."""
    from parallel_rag.graph.fitted_fusion import current_plan

    plan = current_plan(config, workdir)
    return plan.account([e.name for e in config.retrievers])


def _parse_measure(measure: str) -> None:
    import ir_measures

    try:
        ir_measures.parse_measure(measure)
    except (ValueError, NameError) as error:
        raise ValueError(
            f"--measure: {measure!r} is not an ir_measures measure ({error})"
        ) from None
