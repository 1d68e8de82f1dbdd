"""LangChain Documents in: any loader's output is ingested into every configured store with
the same ids, hashing and replacement rules as files, and the converters are a ``BaseLoader``."""

from __future__ import annotations

from pathlib import Path

import pytest
from document_files import two_bm25_config, write_pdf, write_pptx
from langchain_community.document_loaders import PyPDFium2Loader
from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document
from parallel_rag.graph.components import backend_context
from parallel_rag.studio.documents import DocumentLoadError
from parallel_rag.studio.documents.loader import DocumentFileLoader
from parallel_rag.studio.ingestion import ingest_documents, writable_targets, writer_for
from parallel_rag.studio.ingestion.chunk import chunks_from_documents, load_chunks


def _stored_ids(config, base_dir: Path, file_ids: list[str]) -> list[set[str]]:
    """The chunk ids each index holds for ``file_ids``."""
    held = []
    for entry in writable_targets(config):
        writer = writer_for(entry, backend_context(base_dir, config.embeddings))
        writer.open()
        held.append({chunk_id for chunk_id, _, _ in writer.fingerprints(file_ids) or set()})
    return held


def test_a_langchain_loaders_pdf_pages_get_the_files_ids_and_pages(tmp_path):
    path = write_pdf(tmp_path / "manual.pdf")
    documents = PyPDFium2Loader(str(path)).load()  # pages counted from 0, as LangChain does
    chunks, sources = chunks_from_documents(documents, zero_based_pages=True)
    from_file = load_chunks(path)
    assert [c.id for c in chunks] == [c.id for c in from_file]
    assert [c.metadata["page"] for c in chunks] == [1, 2, 3]
    assert set(sources) == {from_file[0].metadata["file_id"]}


def test_documents_are_ingested_into_every_store_and_replaced_by_source(tmp_path):
    config, base_dir = two_bm25_config(tmp_path)
    pages = [
        Document("Page one on valves.", metadata={"source": "https://x.test/a", "page": 1}),
        Document("Page two on pumps.", metadata={"source": "https://x.test/a", "page": 2}),
        Document("A note on hoses.", metadata={"source": "https://x.test/b", "title": "Hoses"}),
    ]
    report = ingest_documents(iter(pages), config, base_dir, progress=False)
    assert report.files == ["https://x.test/a", "https://x.test/b"] and report.chunks == 3
    chunks, sources = chunks_from_documents(pages)
    file_ids = sorted(sources)
    assert _stored_ids(config, base_dir, file_ids) == [{c.id for c in chunks}] * 2
    again = ingest_documents(pages, config, base_dir, progress=False)
    assert again.unchanged == again.indexes  # same ids and hashes: nothing written
    ingest_documents(pages[:1], config, base_dir, progress=False)  # source a has one page now
    kept = {
        c.id
        for c in chunks
        if c.metadata["source"] != "https://x.test/a" or c.metadata["page"] == 1
    }
    assert _stored_ids(config, base_dir, file_ids) == [kept] * 2


def test_a_document_without_a_source_is_named(tmp_path):
    config, base_dir = two_bm25_config(tmp_path)
    documents = [Document("fine", metadata={"source": "s"}), Document("no source")]
    with pytest.raises(DocumentLoadError, match="document 2: metadata 'source' is missing"):
        ingest_documents(documents, config, base_dir, progress=False)


def test_the_converters_are_a_langchain_loader(tmp_path):
    loader = DocumentFileLoader(write_pptx(tmp_path / "deck.pptx"))
    assert isinstance(loader, BaseLoader)
    documents = loader.load()
    assert [(d.metadata["slide"], d.metadata["title"]) for d in documents] == [
        (1, "Quarterly results"),
        (2, "Quarterly results"),
    ]
    assert "two engineers" in documents[1].page_content
