"""Benchmark each rerank scorer's effect and cost on SciFact test and HotpotQA dev500 (not a test).

Two branches per query (BM25 and Qdrant on the packaged all-MiniLM-L6-v2), ``--candidates`` hits
each (default 20, the graph's default for ``top_k: 10``). For every scorer the real ``rerank``
node reorders each branch against the query; we report nDCG@10 per branch and after reciprocal
rank fusion (k=60), before and after, with the rerank cost per branch and per query.

Scorers:
- ``embedding``: cosine under the packaged MiniLM (``overflow: truncate`` at its 256 tokens).
- ``cross_encoder``: ``--cross-encoder PATH`` (any real one, e.g. ms-marco-MiniLM-L6-v2), or by
  default a *probe* cross-encoder built here: the MiniLM backbone with a fresh one-logit head
  fitted as a linear probe on frozen pair features of SciFact *train* queries (each positive,
  one BM25 hard negative, two random negatives). Same architecture and cost as
  ms-marco-MiniLM-L6-v2, so its cost rows are representative; its quality rows are a floor, not
  a claim about trained cross-encoders.
  ``overflow: truncate`` at 512 tokens.
- ``llm``: listwise ranking by a chat model (``reranker.kind: llm``, RankGPT's window of 20 by
  10, so 20 candidates take one call), each passage's first ``--llm-passage-chars`` characters
  (``overflow: truncate``). ``--llm-url`` names an OpenAI-compatible server; by default the
  harness starts the packaged SmolLM2-135M-Instruct on llama.cpp's server on loopback. The
  ``ms/rerank of N`` column is not measured for it (N/10 - 1 calls per rerank).

The ``over budget`` column is the share of candidates that ``overflow: reject`` would refuse.
``--cost-only`` skips quality and the dense index: it times one rerank of BM25's top
``--candidates`` and top ``--cost-candidates`` hits for ``--cost-queries`` queries per data set
(after one warm-up), the figure to read when the machine is quiet.

Usage::

    python bench/rerank.py [--data ../shared/data] [--candidates 20] [--queries 0]
                           [--distractors 0] [--threads 1] [--cross-encoder PATH]
                           [--scorers embedding cross_encoder]

``--queries N`` evaluates the first N judged queries (sorted ids); ``--distractors M`` indexes
only the documents judged for them plus M random others (seed 13) instead of the whole corpus.
Indexes, the probe model and a JSON copy of the results are kept under ``bench/out/rerank``.
Prints markdown tables. Every model pass runs on ``--threads`` torch threads (default 1, so
costs read as one CPU thread). The full run is ~10k documents to embed and ~32k pairs per scorer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.backends.encoders.embeddings import bundled_model_path
from parallel_rag.graph.configuration import PipelineConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.fuse import reciprocal_rank_fusion
from parallel_rag.nodes.records import BranchResult, branch_key
from parallel_rag.nodes.rerank.cross_encoder import CrossEncoderScorer
from parallel_rag.nodes.rerank.listwise import ListwiseLLMScorer
from parallel_rag.nodes.rerank.node import make_rerank_node
from parallel_rag.nodes.rerank.scorers import EmbeddingSimilarityScorer
from parallel_rag.nodes.retrieve import documents_to_hits
from parallel_rag.studio.evaluation import (
    DOC_ID_KEY,
    BeirCollection,
    MissingDatasetError,
    corpus_chunks,
    index_corpus,
    load_beir,
    score_runs,
    single_retrievers,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
WORK = REPO_ROOT / "bench" / "out" / "rerank"
DATASETS = ("scifact", "hotpotqa-dev500")
MEASURE = "nDCG@10"
RRF_K = 60
PROBE_QUERIES = 200
PROBE_HARD_NEGATIVES = 1  # BM25's best non-relevant hit
PROBE_RANDOM_NEGATIVES = 2  # hard negatives alone teach "lexically close = irrelevant"
DISTRACTOR_SEED = 13
COST_QUERIES = 5


def pipeline(name: str, candidates: int) -> PipelineConfig:
    collection = name.replace("-", "_")
    return parse_config(
        {
            "retrievers": [
                {"name": "bm25", "backend": "bm25", "top_k": candidates,
                 "backend_config": {"index_path": "bm25"}},
                {"name": "dense", "backend": "qdrant", "top_k": candidates,
                 "backend_config": {"collection": collection, "path": "qdrant"}},
            ]
        }
    )  # fmt: skip


def subset(collection: BeirCollection, qids: list[str], distractors: int) -> BeirCollection:
    """The evaluated queries with their judged documents plus ``distractors`` random others."""
    queries = {q: collection.queries[q] for q in qids}
    qrels = {q: collection.qrels[q] for q in qids}
    if not distractors:
        return BeirCollection(collection.corpus, queries, qrels)
    judged = {doc for rels in qrels.values() for doc in rels}
    others = sorted(set(collection.corpus) - judged)
    sample = random.Random(DISTRACTOR_SEED).sample(others, min(distractors, len(others)))
    keep = judged | set(sample)
    corpus = {k: v for k, v in collection.corpus.items() if k in keep}
    return BeirCollection(corpus, queries, qrels)


def indexed(name: str, collection: BeirCollection, candidates: int) -> tuple[dict, Path]:
    """BM25 + Qdrant over ``collection.corpus``, built once under bench/out and reused."""
    base_dir = WORK / "index" / name
    config = pipeline(name.split("@")[0], candidates)
    marker = base_dir / "INDEXED"
    if not marker.exists():
        base_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        index_corpus(collection.corpus, config, base_dir)
        marker.write_text(f"{len(collection.corpus)} documents\n")
        print(f"indexed {name} in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return single_retrievers(config, base_dir), base_dir


def retrieve(retrievers: dict, queries: dict[str, str], candidates: int):
    """Every query's branches, as the retrieve node would hand them to rerank."""
    branches: dict[str, list[BranchResult]] = {}
    for qid, text in queries.items():
        branches[qid] = []
        for index, (name, retriever) in enumerate(retrievers.items()):
            started = time.perf_counter()
            docs = retriever.invoke(text, k=candidates)
            hits = documents_to_hits(docs, limit=candidates, filters=None, post_filter=False)
            branches[qid].append(
                BranchResult(
                    branch=branch_key(0, name),
                    view_index=0,
                    view=text,
                    view_kind="original",
                    retriever=name,
                    retriever_index=index,
                    status="ok" if hits else "empty",
                    hits=hits,
                    latency_ms=(time.perf_counter() - started) * 1000,
                    error=None,
                    warning=None,
                )
            )
    return branches


def doc_ids(hits) -> list[str]:
    return [str(h["metadata"][DOC_ID_KEY]) for h in sorted(hits, key=lambda h: h["rank"])]


def quality(branches: dict[str, list[BranchResult]], qrels) -> dict[str, float]:
    """nDCG@10 per branch (by retriever name) and after fusion."""
    names = [b["retriever"] for b in next(iter(branches.values()))]
    out = {}
    for position, name in enumerate(names):
        runs = {qid: doc_ids(bs[position]["hits"]) for qid, bs in branches.items()}
        out[name] = score_runs(runs, qrels, [MEASURE])[MEASURE]
    fused = {
        qid: [str(d["metadata"][DOC_ID_KEY]) for d in reciprocal_rank_fusion(bs, k=RRF_K)]
        for qid, bs in branches.items()
    }
    out["fused"] = score_runs(fused, qrels, [MEASURE])[MEASURE]
    return out


def over_budget_share(scorer, branches, sample: int = 50) -> float:
    """Share of candidates longer than the scorer's budget, on the first ``sample`` queries."""
    over = total = 0
    budget = getattr(scorer, "budget", None)
    for qid in list(branches)[:sample]:
        for branch in branches[qid]:
            texts = [h["content"] for h in branch["hits"]]
            if not texts:
                continue
            if isinstance(scorer, ListwiseLLMScorer):
                over += sum(len(t) > scorer.passage_chars for t in texts)
                total += len(texts)
                continue
            if isinstance(scorer, CrossEncoderScorer):
                counts = scorer.loaded.count_pairs(branch["view"], texts)
            else:
                counts = scorer.count_tokens(texts)
            over += sum(n > budget for n in counts)
            total += len(counts)
    return over / total if total else 0.0


def rerank_all(scorer, branches, candidates: int):
    node = make_rerank_node(scorer, top_k=None, on_failure="warn", max_candidates=candidates)
    reranked: dict[str, list[BranchResult]] = {}
    costs: dict[str, list[float]] = {}
    failures = 0
    for qid, bs in branches.items():
        reranked[qid] = []
        for branch in bs:
            (result,) = node({"result": branch, "query": branch["view"]})["branch_results"]
            failures += result["warning"] is not None
            if "rerank_ms" in result:
                costs.setdefault(branch["retriever"], []).append(result["rerank_ms"])
            reranked[qid].append(result)
    return reranked, costs, failures


def probe_cross_encoder(folder: Path, data: Path, candidates: int) -> str:
    """Build (once) the MiniLM probe cross-encoder from SciFact train (see module docstring)."""
    if (folder / "model.safetensors").exists():
        return str(folder)
    import torch
    import torch.nn.functional as functional
    from sentence_transformers import CrossEncoder

    started = time.perf_counter()
    train = load_beir(data / "scifact", split="train")
    chunks = corpus_chunks(train.corpus)
    bm25 = BM25Index.from_chunks([(c.id, c.content, c.metadata) for c in chunks])
    rng = random.Random(7)
    queries, passages, labels = [], [], []
    for qid in rng.sample(sorted(train.queries), min(PROBE_QUERIES, len(train.queries))):
        text, relevant = train.queries[qid], train.qrels[qid]
        ranked = [h.chunk.metadata[DOC_ID_KEY] for h in bm25.search(text, k=candidates)]
        negatives = [d for d in ranked if d not in relevant][:PROBE_HARD_NEGATIVES]
        pool = sorted(set(train.corpus) - set(relevant) - set(negatives))
        negatives += rng.sample(pool, PROBE_RANDOM_NEGATIVES)
        for doc_id, label in [*[(d, 1.0) for d in relevant], *[(d, 0.0) for d in negatives]]:
            doc = train.corpus[doc_id]
            queries.append(text)
            passages.append(f"{doc['title']}\n{doc['text']}".strip())
            labels.append(label)
    encoder = CrossEncoder(bundled_model_path(), num_labels=1, device="cpu")
    model = encoder.model
    model.eval()
    features = []
    with torch.no_grad():
        for start in range(0, len(queries), 32):
            batch = encoder.tokenizer(
                queries[start : start + 32],
                passages[start : start + 32],
                padding=True,
                truncation="only_second",
                max_length=256,
                return_tensors="pt",
            )
            features.append(model.bert(**batch).pooler_output)
    pooled = torch.cat(features)
    target = torch.tensor(labels)
    positive_weight = torch.tensor((len(labels) - sum(labels)) / max(sum(labels), 1.0))
    torch.manual_seed(0)
    optimiser = torch.optim.Adam(model.classifier.parameters(), lr=1e-2, weight_decay=1e-4)
    for _ in range(500):
        loss = functional.binary_cross_entropy_with_logits(
            model.classifier(pooled).squeeze(-1), target, pos_weight=positive_weight
        )
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    folder.mkdir(parents=True, exist_ok=True)
    encoder.save(str(folder))
    print(
        f"probe cross-encoder: {len(labels)} SciFact train pairs, loss {loss.item():.3f}, "
        f"{time.perf_counter() - started:.0f}s",
        file=sys.stderr,
    )
    return str(folder)


def cost_at(scorer, branches, candidates: int, queries: int = COST_QUERIES) -> float:
    """Mean ms of one rerank of ``candidates`` BM25 hits (re-retrieved at that depth)."""
    node = make_rerank_node(scorer, top_k=None, on_failure="warn", max_candidates=candidates)
    times = []
    for branch in branches[:queries]:
        (result,) = node({"result": branch, "query": branch["view"]})["branch_results"]
        times.append(result["rerank_ms"])
    return statistics.fmean(times) if times else float("nan")


def bm25_branches(collection: BeirCollection, qids: list[str], depth: int):
    """BM25 (in memory, whole corpus) branches for ``qids``: no embedding pass needed."""
    chunks = corpus_chunks(collection.corpus)
    index = BM25Index.from_chunks([(c.id, c.content, c.metadata) for c in chunks])
    branches = []
    for qid in qids:
        text = collection.queries[qid]
        hits = [
            {"id": h.chunk.id, "content": h.chunk.content, "metadata": dict(h.chunk.metadata),
             "rank": rank, "score": float(h.score)}
            for rank, h in enumerate(index.search(text, k=depth), start=1)
        ]  # fmt: skip
        branches.append(
            BranchResult(
                branch=branch_key(0, "bm25"), view_index=0, view=text, view_kind="original",
                retriever="bm25", retriever_index=0, status="ok" if hits else "empty",
                hits=hits, latency_ms=0.0, error=None, warning=None,
            )
        )  # fmt: skip
    return branches


def cost_only(args, scorers: dict[str, Any], label: dict[str, str]) -> None:
    depths = (args.candidates, args.cost_candidates)
    load_before = os.getloadavg()[0]
    rows = []
    for name in args.datasets:
        try:
            collection = load_beir(args.data / name, split="test")
        except MissingDatasetError as error:
            print(f"skipping {name}: {error}", file=sys.stderr)
            continue
        qids = sorted(collection.queries)[: args.cost_queries]
        branches = bm25_branches(collection, qids, max(depths))
        for key, scorer in scorers.items():
            cost_at(scorer, branches, depths[0], queries=1)  # warm-up
            means = [cost_at(scorer, branches, d, queries=len(branches)) for d in depths]
            rows.append((name, label[key], *means, means[1] / depths[1]))
    print(
        f"## Cost of one rerank, {args.threads} torch thread(s), mean of {args.cost_queries} "
        f"queries per data set (load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores)\n"
    )
    print(
        f"| data set | scorer | ms per rerank of {depths[0]} | ms per rerank of {depths[1]} "
        "| ms per candidate |"
    )
    print("|---|---|---:|---:|---:|")
    for name, scorer_label, shallow, deep, per_candidate in rows:
        print(f"| {name} | {scorer_label} | {shallow:.0f} | {deep:.0f} | {per_candidate:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--candidates", type=int, default=20, help="hits per branch")
    parser.add_argument("--queries", type=int, default=0, help="first N judged queries (0 = all)")
    parser.add_argument("--distractors", type=int, default=0, help="corpus subset (0 = all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--scorers", nargs="+", default=["embedding", "cross_encoder"])
    parser.add_argument("--cross-encoder", default=None, help="a real cross-encoder path/name")
    parser.add_argument("--cost-candidates", type=int, default=50, help="depth of the cost row")
    parser.add_argument("--cost-only", action="store_true", help="only time reranks (BM25 hits)")
    parser.add_argument("--cost-queries", type=int, default=10)
    parser.add_argument("--llm-url", default=None, help="OpenAI-compatible base URL (llm scorer)")
    parser.add_argument("--llm-model", default="smollm2")
    parser.add_argument("--llm-passage-chars", type=int, default=400)
    parser.add_argument(
        "--llm-queries",
        type=int,
        default=20,
        help="the llm scorer ranks only the first N queries (a call takes seconds); a "
        "'none' row on the same queries is its baseline (0 = all)",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if "llm" in args.scorers and args.llm_url is None:
            from bench.offline_llm import llama_server

            WORK.mkdir(parents=True, exist_ok=True)
            args.llm_url = stack.enter_context(llama_server(WORK / "llama-server.log"))
        run(args)


def llm_scorer(args) -> ListwiseLLMScorer:
    from parallel_rag.nodes.chat_models import ChatModelSettings, make_chat_model

    settings = ChatModelSettings(
        model=args.llm_model,
        base_url=args.llm_url,
        temperature=0,
        max_tokens=120,
        timeout_seconds=300,
    )
    return ListwiseLLMScorer(
        make_chat_model(settings),
        window_size=20,
        window_step=10,
        passage_chars=args.llm_passage_chars,
        overflow="truncate",
    )


def run(args) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)

    scorers: dict[str, Any] = {}
    if "embedding" in args.scorers:
        scorers["embedding"] = EmbeddingSimilarityScorer(overflow="truncate").prepare()
    if "cross_encoder" in args.scorers:
        model = args.cross_encoder or probe_cross_encoder(
            WORK / "probe-cross-encoder-v2", args.data, args.candidates
        )
        scorers["cross_encoder"] = CrossEncoderScorer(model, overflow="truncate").prepare()
    if "llm" in args.scorers:
        scorers["llm"] = llm_scorer(args)
    label = {
        "llm": f"llm listwise ({args.llm_model}, first {args.llm_passage_chars} chars)",
        "embedding": "embedding (MiniLM cosine)",
        "cross_encoder": "cross_encoder ("
        + (args.cross_encoder or "MiniLM probe, SciFact-train head")
        + ")",
    }

    if args.cost_only:
        cost_only(args, scorers, label)
        return

    rows_quality, rows_cost, record = [], [], {}
    for name in args.datasets:
        try:
            collection = load_beir(args.data / name, split="test")
        except MissingDatasetError as error:
            print(f"skipping {name}: {error}", file=sys.stderr)
            continue
        qids = sorted(collection.queries)
        if args.queries:
            qids = qids[: args.queries]
        collection = subset(collection, qids, args.distractors)
        queries, qrels = collection.queries, collection.qrels
        tag = f"{name}@q{len(qids)}-d{args.distractors}" if args.distractors else name
        retrievers, _ = indexed(tag, collection, args.candidates)
        record[name] = {"queries": len(queries), "documents": len(collection.corpus)}
        branches = retrieve(retrievers, queries, args.candidates)
        before = quality(branches, qrels)
        record[name]["none"] = before
        size = f"{len(queries)} / {len(collection.corpus)}"
        rows_quality.append((name, size, "none (retrieval order)", before, None))
        first = dict(list(queries.items())[:COST_QUERIES])
        deep = retrieve({"bm25": retrievers["bm25"]}, first, args.cost_candidates)
        for key, scorer in scorers.items():
            scored_branches, scored_qrels, scored_size = branches, qrels, size
            if key == "llm" and args.llm_queries and args.llm_queries < len(branches):
                scored_qids = list(branches)[: args.llm_queries]
                scored_branches = {qid: branches[qid] for qid in scored_qids}
                scored_qrels = {qid: qrels[qid] for qid in scored_qids}
                scored_size = f"{len(scored_qids)} / {len(collection.corpus)}"
                baseline = quality(scored_branches, scored_qrels)
                record[name][f"none@{len(scored_qids)}"] = baseline
                rows_quality.append((name, scored_size, "none (retrieval order)", baseline, None))
            share = over_budget_share(scorer, scored_branches)
            started = time.perf_counter()
            reranked, costs, failures = rerank_all(scorer, scored_branches, args.candidates)
            wall = time.perf_counter() - started
            after = quality(reranked, scored_qrels)
            per_query = wall * 1000 / len(scored_branches)
            deep_cost = (
                float("nan")
                if key == "llm"
                else cost_at(scorer, [bs[0] for bs in deep.values()], args.cost_candidates)
            )
            record[name][key] = {
                "quality": after,
                "costs_ms": {b: statistics.fmean(v) for b, v in costs.items()},
                "per_query_ms": per_query,
                "over_budget": share,
                "failures": failures,
                f"cost_at_{args.cost_candidates}_ms": deep_cost,
            }
            reference = before if scored_branches is branches else baseline
            rows_quality.append((name, scored_size, label[key], after, reference))
            all_costs = [c for v in costs.values() for c in v]
            rows_cost.append(
                (
                    name,
                    label[key],
                    statistics.fmean(all_costs),
                    float(np.percentile(all_costs, 95)),
                    per_query,
                    statistics.fmean(all_costs) / args.candidates,
                    deep_cost,
                    share,
                    failures,
                )
            )
            print(f"done {name} / {key} in {wall:.0f}s", file=sys.stderr)

    (WORK / "results.json").write_text(json.dumps(record, indent=2))
    print(
        f"## Effect: {MEASURE}, {args.candidates} candidates per branch, both branches "
        f"reranked, RRF k={RRF_K}\n"
    )
    print("| data set | queries / docs | scorer | bm25 | dense | fused |")
    print("|---|---:|---|---:|---:|---:|")
    for name, n, scorer_label, after, before in rows_quality:
        cells = []
        for column in ("bm25", "dense", "fused"):
            delta = "" if before is None else f" ({after[column] - before[column]:+.3f})"
            cells.append(f"{after[column]:.3f}{delta}")
        print(f"| {name} | {n} | {scorer_label} | " + " | ".join(cells) + " |")
    print(
        f"\n## Cost: rerank node wall time, {args.threads} torch thread(s) on a shared "
        f"{os.cpu_count()}-core CPU (load average {os.getloadavg()[0]:.1f} at the end)\n"
    )
    print(
        f"| data set | scorer | ms/branch (mean) | ms/branch (p95) | ms/query (2 branches) "
        f"| ms/candidate | ms/rerank of {args.cost_candidates} | over budget | refused |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, scorer_label, mean, p95, per_query, per_candidate, deep, share, fails in rows_cost:
        print(
            f"| {name} | {scorer_label} | {mean:.0f} | {p95:.0f} | {per_query:.0f} "
            f"| {per_candidate:.1f} | {'—' if math.isnan(deep) else f'{deep:.0f}'} | {share:.0%} "
            f"| {fails} |"
        )


if __name__ == "__main__":
    main()
