"""``parallel-rag ingest`` prints no third-party debug or info log lines, whatever is installed.

The path that printed ``DEBUG:bm25s:Building index from IDs objects`` in ``make demo`` (before
the demo's install became the core without torch): a first ingest (empty model cache) on the
torch runtime builds the int8 document encoder, ONNX Runtime's quantizer logs on the root
logger, Python then sets the root logger up with a handler that passes every level, and bm25s
(its logger set to DEBUG) writes through it. The command runs as a user runs it, in a
subprocess, with an empty cache folder so that path is taken."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest
from servers import BIN

pytestmark = pytest.mark.integration

LOG_LINE = re.compile(r"^(DEBUG|INFO):(?P<logger>[^:\s]+):", re.MULTILINE)


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="the quantizing path needs the torch extra"
)
def test_first_ingest_prints_no_library_debug_lines(tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "bridges.md").write_text(
        "# Bridges\n\nThe Golden Gate Bridge opened in 1937.\n", encoding="utf-8"
    )
    (corpus / "engines.md").write_text(
        "# Engines\n\nCharles Babbage designed the Analytical Engine.\n", encoding="utf-8"
    )
    # longer than the model reads (256 word pieces): split into passages with the tokenizer
    long_text = " ".join(f"The engine's mill held number {n} in its store." for n in range(60))
    (corpus / "mill.md").write_text(f"# The mill\n\n{long_text}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PARALLEL_RAG_CONFIG"}
    env.update(
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        LANGSMITH_TRACING="false",
        PARALLEL_RAG_CACHE_DIR=str(tmp_path / "cache"),  # empty: the encoder is built now
        PARALLEL_RAG_EMBEDDINGS_RUNTIME="torch",
        PARALLEL_RAG_DOCUMENT_ENCODER="int8",  # the quantizing path, on any CPU
    )
    done = subprocess.run(
        [str(BIN / "parallel-rag"), "ingest", str(corpus)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "ingested 3 file(s)" in done.stdout
    assert list((tmp_path / "cache").rglob("*int8*.onnx"))  # the path that logged was taken
    output = done.stdout + done.stderr
    third_party = [
        m.group(0) for m in LOG_LINE.finditer(output) if not m["logger"].startswith("parallel_rag")
    ]
    assert third_party == [], output
    assert "bm25s" not in output
    assert "Token indices sequence length" not in output  # transformers on a passage's text
