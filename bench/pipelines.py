"""The bench's retrieval pipeline (BM25 + Qdrant Edge, as the embedded defaults ship them), its
indexes, and the branch results offline fusion reads: shared by the quality section, the answer
harness, the fusion and query expansion studies and the runner.

One owner for what "the shipped pipeline over the bench's indexes" means: the configuration a
measurement runs, the index folders it reads (rebuilt only when the corpus, the configuration
or the store's defaults change), and the embedding cache the dense branch reads through. It
imports only ``bench.data``, so every measurement can build on it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from parallel_rag.backends.encoders.embeddings import BUNDLED
from parallel_rag.backends.qdrant_edge.retriever import PassageSettings, QdrantEdgeSettings

from bench.data import HotpotQA, sentence_fingerprint

LEX, DENSE = "lexical", "dense"


def log(message: str) -> None:
    print(message, flush=True)


# ``passages:`` with its defaults (the model's input length, no overlap, the sentence weight),
# spelled out so that an index built under other defaults is built again
PASSAGES_ON = PassageSettings().model_dump()

VARIANTS = {
    False: "one vector per document",
    True: (
        f"passages and sentences, {1 - PASSAGES_ON['sentence_weight']:g} x best passage + "
        f"{PASSAGES_ON['sentence_weight']:g} x best sentence"
        if PASSAGES_ON["sentence_weight"]
        else "passages, best passage"
    ),
}


def passages_by_default() -> bool:
    """Whether the shipped Qdrant Edge settings store passages (the default dense variant)."""
    return QdrantEdgeSettings().passages is not None


def pipeline(
    work: Path,
    collection: str,
    *,
    depth: int,
    k1: float | None = None,
    b: float | None = None,
    fusion: dict[str, Any] | None = None,
    passages: Any = "default",
    reranker: dict | None = None,
    bm25_dir: str = "bm25",
) -> dict[str, Any]:
    """A BM25 + Qdrant Edge pipeline over the bench's indexes: with no arguments, what a
    configuration with no settings gets (the embedded defaults' backends at their default
    settings and an empty ``fusion:`` block), pointed at the bench's index paths. ``k1``/``b``
    set BM25's, ``fusion`` the ``fusion:`` block, ``passages`` the dense entry's (``"default"``:
    unset; ``None``: one vector per document; a mapping: passages). Generation is the cheap
    lexical extractive one (quality figures are about the fused documents, not the answer)."""
    lexical: dict[str, Any] = {"index_path": str(work / bm25_dir)}
    lexical.update({name: v for name, v in (("k1", k1), ("b", b)) if v is not None})
    config: dict[str, Any] = {
        "retrievers": [
            {"name": LEX, "backend": "bm25", "top_k": depth, "backend_config": lexical},
            edge_entry(work, collection, depth, passages),
        ],
        "fusion": dict(fusion or {}),
        "generator": {"kind": "extractive", "min_similarity": None},
    }
    if reranker:
        config["reranker"] = reranker
    return config


def edge_entry(work: Path, collection: str, depth: int, passages: Any) -> dict[str, Any]:
    """The dense retriever: Qdrant Edge over ``collection`` (its passages collection when
    ``passages`` is on). ``passages`` is None (one vector per document), a ``passages:``
    mapping, or ``"default"`` (no ``passages`` key: what a user's configuration gets)."""
    on = passages_by_default() if passages == "default" else passages is not None
    settings: dict[str, Any] = {
        "path": str(work / "edge"),
        "collection": f"{collection}_passages" if on else collection,
    }
    if passages != "default":
        settings["passages"] = passages
    return {"name": DENSE, "backend": "qdrant_edge", "top_k": depth, "backend_config": settings}


def no_fusion_settings(
    work: Path, collection: str, depth: int, passages: Any = "default"
) -> dict[str, Any]:
    """The bench pipeline with no ``fusion:`` block: what a user's configuration gets (the
    dense retriever with or without passages, see ``edge_entry``)."""
    config = pipeline(work, collection, depth=depth)
    config.pop("fusion")
    config["retrievers"][1] = edge_entry(work, collection, depth, passages)
    return config


def build_edge_indexes(
    corpus: dict, work: Path, collection: str, depth: int, passages: bool
) -> None:
    """BM25 and Qdrant Edge collections of the corpus (one vector per document; with
    ``passages``, a passages collection too), vectors from the embedding cache; each kept when
    already built for the same corpus."""
    from parallel_rag.graph.loading import parse_config
    from parallel_rag.studio.evaluation import index_corpus

    signature = {
        "docs": len(corpus),
        "ids": sorted(corpus)[:5],
        "collection": collection,
        "sentences": sentence_fingerprint(corpus),
        # the store's defaults (index build, 8-bit copies): a collection built before one
        # changed is not what a user gets now
        "store": QdrantEdgeSettings().model_dump(mode="json", exclude={"path", "collection"}),
    }
    wanted = {"plain": None, "passages": PASSAGES_ON}
    if not passages:
        del wanted["passages"]
    built = work / "built.json"
    done = json.loads(built.read_text()) if built.is_file() else {}
    if done.get("signature") != signature:
        shutil.rmtree(work, ignore_errors=True)
        done = {"signature": signature}
    todo = [name for name in wanted if name not in done or done[name] != wanted[name]]
    if not todo:
        log(f"[index] {collection}: reusing {work}")
        return
    work.mkdir(parents=True, exist_ok=True)
    config = pipeline(work, collection, depth=depth)
    config["retrievers"] = [config["retrievers"][0]] + [
        {**edge_entry(work, collection, depth, wanted[name]), "name": f"{DENSE}_{name}"}
        for name in todo
    ]
    wall, cpu = time.perf_counter(), time.process_time()
    index_corpus(corpus, parse_config(config), work)
    log(
        f"[index] {collection} ({', '.join(todo)}): built in {time.perf_counter() - wall:.0f} s "
        f"wall, {time.process_time() - cpu:.0f} s CPU"
    )
    built.write_text(json.dumps({**done, **{name: wanted[name] for name in todo}}))


@contextmanager
def edge_reads_the_cache(cached) -> Iterator[None]:
    """The Qdrant Edge backend embeds queries (the retriever) and passages and sentences (its
    points) through the bench's cache."""
    from parallel_rag.backends.qdrant_edge import points as qdrant_edge_points
    from parallel_rag.backends.qdrant_edge import retriever as qdrant_edge
    from parallel_rag.nodes.generate import sentence_vectors  # the sentences' embedder

    modules = (qdrant_edge, qdrant_edge_points, sentence_vectors)
    original = qdrant_edge.load_embeddings

    def patched(model: str = BUNDLED, device: str = "cpu"):
        return cached if model == BUNDLED else original(model, device)

    for module in modules:
        module.load_embeddings = patched
    try:
        yield
    finally:
        for module in modules:
            module.load_embeddings = original


def branch_result(
    name: str,
    retriever_index: int,
    view: str,
    documents: list,
    depth: int,
    *,
    view_index: int = 0,
    view_kind: str = "original",
) -> dict:
    """One retriever's ``documents`` for one query view as the retrieve node records them."""
    from parallel_rag.nodes.retrieve import documents_to_hits

    hits = documents_to_hits(documents, limit=depth, filters=None, post_filter=False)
    return {
        "branch": f"q{view_index}:{name}",
        "view_index": view_index,
        "view": view,
        "view_kind": view_kind,
        "retriever": name,
        "retriever_index": retriever_index,
        "status": "ok" if hits else "empty",
        "hits": hits,
        "latency_ms": 0.0,
        "error": None,
        "warning": None,
    }


def fingerprint(value: Any) -> str:
    """A short stable hash of a JSON-able value: what an index or a cached run was made from."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def ensure_index(data: HotpotQA, config, work: Path, log: Callable[[str], None] = log) -> None:
    """The pooled paragraphs indexed with the default config under ``work`` (kept while the
    corpus and the config are unchanged)."""
    from parallel_rag.studio.evaluation import index_corpus

    marker = work / "index.json"
    wanted = {
        "docs": len(data.corpus),
        "config": fingerprint(config.model_dump(mode="json")),
        "sentences": sentence_fingerprint(data.corpus),
    }
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        return
    log(f"[index] {len(data.corpus)} paragraphs into {work}")
    work.mkdir(parents=True, exist_ok=True)
    for child in (work / ".parallel-rag",):
        if child.exists():
            shutil.rmtree(child)
    index_corpus(data.corpus, config, work)
    marker.write_text(json.dumps(wanted))
