"""Query and document embedding on ONNX Runtime for the bundled all-MiniLM-L6-v2.

A question is one short sequence: through sentence-transformers on torch it costs about 17 ms
of CPU, most of it framework overhead around a small model; the same network on ONNX Runtime
with one thread takes about 6 ms (``bench/ANN-RESULTS.md``). Documents (ingest's chunks and
sentences) can run on the same graph in a second session with ``encoder_threads()`` threads, in
length-sorted batches (little padding): the ``onnx`` document encoder
(``embeddings.DOCUMENT_ENCODER_ENV``), about half the CPU of sentence-transformers on torch for
a sentence (``bench/INGEST-RESULTS.md``). Or on an int8 copy of the graph (``quantized_graph``:
weights quantized per output channel, activations per run), one text a run: the default on a
CPU without AMX, about half the CPU of float32 for a sentence and two thirds of bf16 for a
chunk, for vectors within a few hundredths of cosine of the torch ones.

The ONNX graph (BERT, mean pooling over the attention mask, L2 normalisation) is exported
locally from the packaged weights on first use and kept in a cache directory
(``$PARALLEL_RAG_CACHE_DIR``, else ``~/.cache/parallel-rag``), keyed by the weights file and
the torch version. Before it is used, its vectors are compared with the torch model's on probe
texts; any failure (no ``onnxruntime``/``onnx``, export error, a mismatch) leaves the torch
path in place.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings
from parallel_rag.backends.encoders.embeddings import WrappedEmbeddings

log = logging.getLogger(__name__)

THREADS_ENV = "PARALLEL_RAG_ENCODER_THREADS"
"""Threads of the document session (default: the CPUs this process may run on)."""
DOCUMENT_BATCH = 32
"""Texts per run of the document session (sorted by length first, so a batch pads little)."""

ARENA_SHRINKAGE = "memory.enable_memory_arena_shrinkage"
"""ONNX Runtime's run option naming the devices whose arena is shrunk after the run."""

MAX_COSINE_GAP = 1e-5
"""An ONNX vector must have cosine >= 1 - this with the torch vector of the same text."""
PROBES = (
    "Does regular exercise lower blood pressure?",
    "a\nquestion over two lines",
    "Mutations in BRCA1 raise the lifetime risk of breast and ovarian cancer.",
    "Click here to read the 2024 annual report (PDF, 3 MB).",
    " ".join(["The long passage repeats itself until it passes the model's limit."] * 40),
)
INT8_MIN_COSINE = 0.97
"""The lowest cosine an int8 document vector of a probe text may have with the torch vector.
Per-channel int8 gives 0.978 at worst on the probes (on SciFact: chunks 0.991 at worst, 0.995
on average; sentences 0.976 and 0.993); per-tensor int8, whose vectors move about four times as
far, gives 0.932, so a graph quantized the wrong way is refused."""
_export_lock = threading.Lock()


def cache_dir() -> Path:
    configured = os.environ.get("PARALLEL_RAG_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "parallel-rag"


def _weights_key(model_dir: Path) -> str:
    import torch

    parts = [torch.__version__]
    for name in ("model.safetensors", "pytorch_model.bin", "config.json"):
        path = model_dir / name
        if path.is_file():
            stat = path.stat()
            parts.append(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def exported_graph(model_dir: str | Path) -> Path:
    """Where the graph of the model in ``model_dir`` is exported: one file per weights and torch
    version, so other exports in the cache folder are never taken for it."""
    return cache_dir() / "onnx" / f"minilm-query-{_weights_key(Path(model_dir))}.onnx"


def quantized_graph(model_dir: str | Path) -> Path:
    """Where the int8 copy of ``exported_graph(model_dir)`` is written."""
    source = exported_graph(model_dir)
    return source.with_name(f"{source.stem}-int8-per-channel.onnx")


def _quantize(source: Path, target: Path) -> None:
    """Write an int8 copy of the graph ``source`` to ``target`` (atomically, as ``_export``):
    ONNX Runtime's dynamic quantization, weights per output channel (per-tensor weights move
    vectors about four times as far for the same speed; ``bench/INGEST-RESULTS.md``)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = target.with_name(f"{target.stem}.{os.getpid()}.{threading.get_ident()}.tmp.onnx")
    logging.disable(logging.WARNING)  # it advises pre-processing on the root logger, every call
    try:
        quantize_dynamic(str(source), str(partial), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    os.replace(partial, target)


def _export(client, target: Path) -> None:
    """Write the model's query graph to ``target`` (atomically: a temporary file, then
    renamed, so concurrent processes never read half a file)."""
    import torch

    bert = client[0].auto_model.eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(out.dtype)
            pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    sample = client.tokenizer(["a sample question"], return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(),
            tuple(sample[name] for name in names),
            str(partial),
            input_names=names,
            output_names=["embedding"],
            dynamic_axes={
                **{n: {0: "batch", 1: "tokens"} for n in names},
                "embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    os.replace(partial, target)


def encoder_threads() -> int:
    """Threads for encoding documents: ``$PARALLEL_RAG_ENCODER_THREADS``, else the CPUs this
    process may run on (what torch uses by default)."""
    configured = os.environ.get(THREADS_ENV)
    if configured:
        return max(1, int(configured))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _session(onnxruntime, path: Path, threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxQueryEmbeddings(WrappedEmbeddings):
    """``embed_query`` on ONNX Runtime (one thread), ``embed_documents`` on ONNX Runtime too
    when a document session is given (else the wrapped model's), and every other attribute
    from the wrapped LangChain ``HuggingFaceEmbeddings``. With an ``int8_session`` every
    document runs on it instead, one text a run (``_one_by_one``). With ``long_tokens`` (the bf16
    encoder), documents over that many word pieces go to the wrapped model, the others to the
    document session."""

    def __init__(
        self,
        inner: Embeddings,
        session,
        tokenizer,
        document_session=None,
        long_tokens: int | None = None,
        int8_session=None,
    ):
        """``session`` is the one-thread query session, or a callable making it on the first
        query: an ingest, which embeds no query, then never holds it (about 100 MB)."""
        super().__init__(inner)
        # private names: every other attribute is the wrapped model's
        self._session = session
        self._session_lock = threading.Lock()
        self._query_tokenizer = tokenizer
        self._document_session = document_session
        self._long_tokens = long_tokens
        self._int8_session = int8_session

    @property
    def documents_on_onnx(self) -> bool:
        return self._document_session is not None

    @property
    def documents_on_int8(self) -> bool:
        return self._document_session is not None and self._int8_session is not None

    @property
    def query_session(self):
        """The query session, made now if it was deferred."""
        if callable(self._session):
            with self._session_lock:
                if callable(self._session):
                    self._session = self._session()
        return self._session

    def embed_query(self, text: str) -> list[float]:
        encoded = self._query_tokenizer.encode(text.replace("\n", " "))  # as HuggingFaceEmbeddings
        feed = {
            "input_ids": np.asarray([encoded.ids], dtype=np.int64),
            "attention_mask": np.asarray([encoded.attention_mask], dtype=np.int64),
            "token_type_ids": np.asarray([encoded.type_ids], dtype=np.int64),
        }
        return self.query_session.run(None, feed)[0][0].tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self._document_session is None:
            return self.inner.embed_documents(texts)
        if self._int8_session is not None:
            if not texts:
                return []
            return self._one_by_one(self._encode(texts), self._int8_session).tolist()
        if self._long_tokens is None or not texts:
            return self.document_matrix(texts).tolist()
        encoded = self._encode(texts)
        long = [len(e.ids) > self._long_tokens for e in encoded]
        short_rows = [i for i, is_long in enumerate(long) if not is_long]
        long_rows = [i for i, is_long in enumerate(long) if is_long]
        vectors: list = [None] * len(texts)
        if short_rows:
            matrix = self._matrix([encoded[i] for i in short_rows], self._document_session)
            for i, row in zip(short_rows, matrix.tolist(), strict=True):
                vectors[i] = row
        if long_rows:
            rows = self.inner.embed_documents([texts[i] for i in long_rows])
            for i, row in zip(long_rows, rows, strict=True):
                vectors[i] = list(row)
        return vectors

    def document_matrix(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors as one float32 row each: the texts are tokenized, sorted by
        length and run ``DOCUMENT_BATCH`` at a time, each batch padded to its longest text
        only (padding is masked out of attention and pooling, so a vector does not depend on
        its batch)."""
        return self._matrix(self._encode(texts), self._document_session)

    def _encode(self, texts: list[str]) -> list:
        # newlines as spaces, as HuggingFaceEmbeddings does
        return self._query_tokenizer.encode_batch([t.replace("\n", " ") for t in texts])

    def _matrix(self, encoded: list, session) -> np.ndarray:
        """``document_matrix`` of texts already tokenized, run on ``session``."""
        lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(encoded))
        order = np.argsort(lengths, kind="stable")
        matrix: np.ndarray | None = None
        last = (len(order) - 1) // DOCUMENT_BATCH * DOCUMENT_BATCH
        for start in range(0, len(order), DOCUMENT_BATCH):
            rows = order[start : start + DOCUMENT_BATCH]
            width = int(lengths[rows].max())
            feed = {
                name: np.zeros((len(rows), width), dtype=np.int64)
                for name in ("input_ids", "attention_mask", "token_type_ids")
            }
            for slot, row in enumerate(rows):
                item, size = encoded[row], int(lengths[row])
                feed["input_ids"][slot, :size] = item.ids
                feed["attention_mask"][slot, :size] = 1
                feed["token_type_ids"][slot, :size] = item.type_ids
            options = give_back_arena() if start == last else None
            vectors = session.run(None, feed, options)[0]
            if matrix is None:
                matrix = np.empty((len(encoded), vectors.shape[1]), dtype=np.float32)
            matrix[rows] = vectors
        return matrix if matrix is not None else np.zeros((0, 0), dtype=np.float32)

    def _one_by_one(self, encoded: list, session) -> np.ndarray:
        """Texts already tokenized, each in a run of its own on the one-thread ``session``,
        ``encoder_threads()`` runs at a time. The int8 graph quantizes its activations with one
        scale per run, so texts batched together would move each other's vectors (by up to
        0.007 cosine): one at a time, a text's vector is the same whatever else is embedded.
        It costs no more CPU than batches: a text pads nothing, and on one thread a run pays
        no synchronisation (``bench/INGEST-RESULTS.md``)."""

        def run(item) -> np.ndarray:
            feed = {
                "input_ids": np.asarray([item.ids], dtype=np.int64),
                "attention_mask": np.ones((1, len(item.ids)), dtype=np.int64),
                "token_type_ids": np.asarray([item.type_ids], dtype=np.int64),
            }
            return session.run(None, feed)[0][0]

        if len(encoded) < 2:
            rows = [run(item) for item in encoded]
        else:
            with ThreadPoolExecutor(min(encoder_threads(), len(encoded))) as pool:
                rows = list(pool.map(run, encoded))
        return np.asarray(rows, dtype=np.float32).reshape(len(encoded), -1)


def give_back_arena():
    """Run options under which ONNX Runtime hands its arena's free memory back at the end of
    the run. The arena otherwise keeps the most a call ever needed: given back after each
    call's last batch, an ingest held about 110 MB less between batches (and grew half as
    fast) for the same CPU (``bench/INGEST-RESULTS.md``)."""
    import onnxruntime

    options = onnxruntime.RunOptions()
    options.add_run_config_entry(ARENA_SHRINKAGE, "cpu:0")
    return options


def onnx_query_embeddings(
    inner: Embeddings,
    model_dir: str,
    documents: bool = False,
    long_tokens: int | None = None,
    int8: bool = False,
) -> Embeddings | None:
    """``inner`` (a LangChain ``HuggingFaceEmbeddings`` over the bundled model in
    ``model_dir``, or the bf16 wrapper of one) with its queries on ONNX Runtime, and its
    documents too when ``documents``: on the int8 graph with ``int8``, else in float32 (those
    over ``long_tokens`` word pieces, if given, on a bf16 ``inner``); None when that is not
    available or its query vectors differ from the torch model's (documents whose vectors
    differ stay on ``inner``; int8 vectors that are off leave documents in float32)."""
    try:
        import onnxruntime
        from tokenizers import Tokenizer

        client = inner._client  # the SentenceTransformer behind LangChain's wrapper
        target = exported_graph(model_dir)
        with _export_lock:
            if not target.is_file():
                _export(client, target)

        def query_session():  # one short sequence: more threads contend
            return _session(onnxruntime, target, 1)

        documents = _session(onnxruntime, target, encoder_threads()) if documents else None
        # Its own tokenizer: the transformers one changes its settings on every call, which
        # is not safe while another thread is encoding documents with it.
        tokenizer = Tokenizer.from_str(client.tokenizer.backend_tokenizer.to_str())
        tokenizer.no_padding()
        tokenizer.enable_truncation(client.max_seq_length)
        # with a document session the query session (the same graph) waits for a query
        session = query_session if documents is not None else query_session()
        fast = OnnxQueryEmbeddings(inner, session, tokenizer, documents, long_tokens)
        for probe in PROBES:
            reference = np.asarray(inner.embed_query(probe))
            found = (
                fast.document_matrix([probe])[0]
                if documents is not None
                else np.asarray(fast.embed_query(probe))
            )
            if float(found @ reference) < 1 - MAX_COSINE_GAP:
                log.warning("ONNX query vectors differ from the torch model's; using torch")
                return None
        if documents is not None:
            float32 = getattr(inner, "inner", inner)  # under a bf16 wrapper: the float32 model
            reference = np.asarray(float32.embed_documents(list(PROBES)))
            gaps = np.einsum("ij,ij->i", fast.document_matrix(list(PROBES)), reference)
            if float(gaps.min()) < 1 - MAX_COSINE_GAP:
                log.warning("ONNX document vectors differ from the torch model's; using torch")
                fast._document_session = None
            elif int8:
                fast._int8_session = int8_session(fast, onnxruntime, target, model_dir, reference)
        return fast
    except Exception as error:  # noqa: BLE001 - any failure keeps the torch path
        log.info(
            "ONNX query embedding unavailable (%s: %s); using torch", type(error).__name__, error
        )
        return None


def int8_session(fast: OnnxQueryEmbeddings, onnxruntime, graph: Path, model_dir: str, reference):
    """A document session on the int8 copy of ``graph`` (quantized on first use), or None when
    that fails or its vectors of the ``PROBES`` (``fast`` tokenizes them) are further than
    ``INT8_MIN_COSINE`` from the torch model's (``reference``, a row per probe)."""
    try:
        target = quantized_graph(model_dir)
        with _export_lock:
            if not target.is_file():
                _quantize(graph, target)
        session = _session(onnxruntime, target, 1)  # one text a run: see ``_one_by_one``
        found = fast._one_by_one(fast._encode(list(PROBES)), session)
        cosines = np.einsum("ij,ij->i", found, np.asarray(reference))
    except Exception as error:  # noqa: BLE001 - short documents stay in float32
        log.warning("int8 document encoding unavailable (%s: %s)", type(error).__name__, error)
        return None
    if float(cosines.min()) < INT8_MIN_COSINE:
        log.warning("int8 document vectors differ from the torch model's; using float32")
        return None
    return session
