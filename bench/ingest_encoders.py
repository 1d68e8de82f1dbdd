"""Document encoders for ``parallel-rag ingest`` compared on the same texts: the chunks of the
first SciFact abstracts (as ingest cuts them) and those chunks' sentences (as the sentence
vectors split them), the two kinds of text the default stores embed at ingest.

Run: ``python -m bench.ingest_encoders [--docs 500]`` (prints a Markdown table; the results go
into bench/INGEST-RESULTS.md by hand, beside the command). Every encoder is the packaged
all-MiniLM-L6-v2; a row gives chunks/s and sentences/s (wall and CPU), and the lowest cosine of
its vectors with the torch ones (how far the stored vectors move). Rows:

- torch, 64 at a time in corpus order: the previous ingest (``EMBED_BATCH = 64``);
- torch, one length-sorted call: sentence-transformers sorts each call's texts by length;
- torch with bfloat16 matrix products (``Bf16DocumentEmbeddings``), length-sorted batches;
- ONNX Runtime fp32 (the graph ``backends/encoders/onnx_query.py`` exports), length-sorted batches;
- ONNX Runtime int8 (that graph with dynamically quantized weights, per output channel), one
  text a run on one-thread sessions, a run per CPU at once: the ``int8`` document encoder.

The torch model, not the shipped document encoder, is the reference, so it runs the same
whatever ``PARALLEL_RAG_DOCUMENT_ENCODER`` says.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

import numpy as np
from parallel_rag.backends.encoders.embeddings import (
    BF16_BATCH,
    Bf16DocumentEmbeddings,
    bundled_model_path,
    load_embeddings,
)
from parallel_rag.backends.encoders.onnx_query import (
    OnnxQueryEmbeddings,
    encoder_threads,
    onnx_query_embeddings,
)
from parallel_rag.nodes.generate.sentences import split_sentences
from parallel_rag.studio.ingestion.chunk import load_chunks

from bench.data import data_root


def sample_texts(docs: int) -> tuple[list[str], list[str]]:
    """The chunks of the first ``docs`` SciFact abstracts and their distinct sentences."""
    corpus = data_root() / "scifact" / "corpus.jsonl"
    sample = Path(os.environ.get("TMPDIR", "/tmp")) / f"ingest-encoders-scifact-{docs}.jsonl"
    with corpus.open(encoding="utf-8") as source:
        sample.write_text("".join(itertools.islice(source, docs)), encoding="utf-8")
    chunks = [c.content for c in load_chunks(sample, chunk_size=1000, chunk_overlap=150)]
    sentences = list(dict.fromkeys(s for c in chunks for s in split_sentences(c)))
    return chunks, sentences


def timed(encode, texts: list[str]) -> tuple[np.ndarray, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    matrix = np.asarray(encode(texts), dtype=np.float32)
    return matrix, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    args = parser.parse_args()
    chunks, sentences = sample_texts(args.docs)
    shipped = load_embeddings().inner  # the ONNX query wrapper (over the bf16 one, on AMX)
    assert isinstance(shipped, OnnxQueryEmbeddings)
    torch_model = shipped.inner
    if isinstance(torch_model, Bf16DocumentEmbeddings):
        torch_model = torch_model.inner
    fast = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True)
    assert fast is not None and fast.documents_on_onnx
    int8 = onnx_query_embeddings(torch_model, bundled_model_path(), documents=True, int8=True)
    assert int8 is not None and int8.documents_on_int8  # the ``int8`` document encoder
    bf16 = Bf16DocumentEmbeddings(torch_model)

    def in_order(texts: list[str]) -> list:
        rows = []
        for start in range(0, len(texts), 64):
            rows.extend(torch_model.embed_documents(texts[start : start + 64]))
        return rows

    encoders = {
        "torch (sentence-transformers), 64 at a time in corpus order (before)": in_order,
        "torch (sentence-transformers), one length-sorted call": torch_model.embed_documents,
        f"torch bf16 autocast, batches of {BF16_BATCH}, one length-sorted call": (
            bf16.embed_documents
        ),
        f"ONNX Runtime fp32, {encoder_threads()} threads, length-sorted": fast.document_matrix,
        f"ONNX Runtime int8, one text a run on {encoder_threads()} threads": int8.embed_documents,
    }
    for encode in (fast.document_matrix, int8.embed_documents, bf16.embed_documents):
        encode(chunks[:64])  # warm every encoder once
    print(
        f"{args.docs} SciFact abstracts: {len(chunks)} chunks, {len(sentences)} distinct "
        f"sentences; load average {os.getloadavg()[0]:.2f}\n"
    )
    print(
        "| encoder | chunks/s (wall) | chunk CPU s | sentences/s (wall) | sentence CPU s "
        "| cosine to torch, min / mean |"
    )
    print("|---|---|---|---|---|---|")
    reference: dict[str, np.ndarray] = {}
    for name, encode in encoders.items():
        row = [name]
        cosines = []
        for kind, texts in (("chunks", chunks), ("sentences", sentences)):
            matrix, wall, cpu = timed(encode, texts)
            reference.setdefault(kind, matrix)
            cosines.extend(np.einsum("ij,ij->i", matrix, reference[kind]).tolist())
            row += [f"{len(texts) / wall:.1f}", f"{cpu:.1f}"]
        print(f"| {' | '.join(row)} | {min(cosines):.6f} / {np.mean(cosines):.6f} |", flush=True)


if __name__ == "__main__":
    main()
