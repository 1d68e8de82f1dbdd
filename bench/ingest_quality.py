"""Retrieval quality at the shipped defaults under the document encoder ingest uses: SciFact
test nDCG@10 and HotpotQA dev500 questions 101-500 AllSupport@10, the two quality bars, and
Vaswani nDCG@10 (every judged query: a collection nothing was tuned on), each from BM25 and
Qdrant Edge indexes built fresh by ``index_corpus`` at the bench's shipped pipeline
(``bench.pipelines.pipeline``), queried through the real graph, as the full harness computes
its shipped row.

Run it once per encoder to compare them (the embedding cache keeps each encoder's vectors
apart): ``PARALLEL_RAG_DOCUMENT_ENCODER=torch python -m bench.ingest_quality``, then ``=bf16``,
``=int8``. It prints one table row; the rows go into bench/INGEST-RESULTS.md. Queries go
through the cache too: on the bf16 row they are bf16 vectors where the product embeds them in
float32 (the two agree to 1e-4 cosine); on the int8 row they are float32, as in the product.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from parallel_rag.backends.encoders.embeddings import document_encoder
from parallel_rag.graph.builder import build_graph
from parallel_rag.graph.loading import parse_config
from parallel_rag.studio.evaluation import index_corpus, run_graph, score_runs

from bench.data import load_hotpotqa, load_scifact, load_vaswani
from bench.embedding_cache import EmbeddingCache, installed
from bench.pipelines import edge_reads_the_cache, pipeline
from bench.scoring import hotpot_metrics

DEPTH = 100
HOTPOT_TUNE = 100  # HotpotQA's first questions, tuned on (bench.quality); 101-500 reported
OUT_DIR = Path(__file__).resolve().parent / "out"
CACHE_DIR = OUT_DIR / "cache"  # the harness's embedding cache


def shipped_indexes(corpus: dict, work: Path, collection: str):
    """BM25 and the shipped dense index (passages and sentences) of ``corpus``, built fresh
    into ``work`` (only what the shipped defaults read, not the harness's other rows)."""
    shutil.rmtree(work, ignore_errors=True)
    config = parse_config(pipeline(work, collection, depth=DEPTH))
    index_corpus(corpus, config, work)
    return config


def main() -> None:
    started, cpu = time.perf_counter(), time.process_time()
    work = OUT_DIR / "work" / "ingest-quality"
    sci_test, hotpot = load_scifact("test"), load_hotpotqa()
    cache = EmbeddingCache(CACHE_DIR)
    with installed(cache) as cached, edge_reads_the_cache(cached):
        config = shipped_indexes(sci_test.corpus, work / "scifact", "scifact")
        graph = build_graph(config, base_dir=work / "scifact")
        runs = run_graph(graph, sci_test.queries, DEPTH)
        scifact = score_runs(runs, sci_test.qrels, ["nDCG@10"])["nDCG@10"]
        print(f"scifact test nDCG@10 {scifact:.4f}", flush=True)

        config = shipped_indexes(hotpot.corpus, work / "hotpotqa", "hotpotqa")
        _, report_set = hotpot.split(HOTPOT_TUNE)
        queries = {q["_id"]: q["question"] for q in report_set}
        graph = build_graph(config, base_dir=work / "hotpotqa")
        runs = run_graph(graph, queries, DEPTH)
        support = hotpot_metrics(runs, report_set, hotpot.corpus)["AllSupport@10"]
        print(f"hotpotqa 101-500 AllSupport@10 {support:.4f}", flush=True)

        vaswani = load_vaswani()
        config = shipped_indexes(vaswani.corpus, work / "vaswani", "vaswani")
        graph = build_graph(config, base_dir=work / "vaswani")
        runs = run_graph(graph, vaswani.queries, DEPTH)
        untuned = score_runs(runs, vaswani.qrels, ["nDCG@10"])["nDCG@10"]
        print(f"vaswani nDCG@10 {untuned:.4f}", flush=True)
    print(
        f"| {document_encoder()} | {scifact:.3f} | {support:.3f} | {untuned:.3f} | "
        f"{time.perf_counter() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU, "
        f"load {os.getloadavg()[1]:.1f} |"
    )


if __name__ == "__main__":
    main()
