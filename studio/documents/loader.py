"""The converters as a LangChain ``BaseLoader``: a file (PDF, HTML, DOCX, PPTX, CSV, JSONL,
Markdown, text) becomes Documents with the structure parallel-rag keeps (``page``, ``slide``,
``title``, ``record_id``), for use in any LangChain pipeline; ``ingest_documents`` takes them
back with the same ids as ingesting the file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document
from parallel_rag.studio.documents import DEFAULT_MAX_FILE_MB, convert_file


class DocumentFileLoader(BaseLoader):
    """A Document per page (PDF), slide (PPTX), record (CSV/JSONL) or whole document (HTML,
    DOCX as Markdown; Markdown; text). A bad file raises ``BadFileError`` naming it and the
    reason; a missing converter package raises ``MissingExtraError`` naming the extra."""

    def __init__(self, path: str | Path, *, max_file_mb: float = DEFAULT_MAX_FILE_MB):
        self.path = Path(path)
        self.max_file_mb = max_file_mb

    def lazy_load(self) -> Iterator[Document]:
        for record in convert_file(self.path, max_file_mb=self.max_file_mb):
            base = {**record.metadata, "source": str(self.path), "title": record.title}
            if record.record_id:
                base["record_id"] = record.record_id
            for segment in record.segments:
                yield Document(page_content=segment.text, metadata={**base, **segment.metadata})
