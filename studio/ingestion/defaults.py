"""The one place ingest's sizes are written: how chunks are cut, and how many go through the
encoder and the stores at a time. The CLI's ``--chunk-size``/``--chunk-overlap`` defaults, the
Python API's keyword defaults and the docs read these, so a change here is a change everywhere.
"""

from __future__ import annotations

CHUNK_SIZE = 1000
"""Characters per chunk (``RecursiveCharacterTextSplitter``): about 230 word pieces, within the
packaged MiniLM's 256, so most chunks are one passage the model reads whole."""

CHUNK_OVERLAP = 150
"""Characters two neighbouring chunks of one segment share, so a sentence cut by a chunk
boundary is whole in one of them."""

EMBED_BATCH = 512
"""Chunks per call to the model: the encoders sort a call's texts by length, so a large call
pads little (a chunk is short or long; 64 in corpus order padded most to the longest)."""

SENTENCE_BATCH = 512
"""Sentences embedded and stored per transaction of the sentence-vector store: an ingest killed
halfway keeps what it stored and the next one embeds only the rest."""

INGEST_BATCH_CHUNKS = 2048
"""Chunks embedded and written per batch (whole files): ingest's memory is bounded by a batch,
not the corpus, and a killed ingest keeps every batch it wrote."""
