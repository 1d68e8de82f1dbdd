"""PDF text layers, a segment per page (``page`` is 1-based), with pypdfium2.

Chosen by bench/converters.py: 10x pypdf's pages/s and 37x pdfplumber's at the same or lower
peak RSS, and it joins words hyphenated across lines. A damaged, truncated or encrypted PDF,
or one whose pages carry no text at all (scanned images), is a bad file named with the reason.
"""

from __future__ import annotations

from pathlib import Path

from parallel_rag.studio.documents.base import BadFileError, Record, Segment, require

# PDFium's error codes (FPDF_GetLastError) as pypdfium2 words them
_PASSWORD = "password"


def convert_pdf(path: Path, data: bytes) -> list[Record]:
    pdfium = require("pypdfium2", path)
    if not data.strip():
        raise BadFileError(f"{path}: empty file (no text)")
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        if _PASSWORD in str(error).lower():
            raise BadFileError(
                f"{path}: encrypted PDF (needs a password); decrypt it before ingesting"
            ) from None
        raise BadFileError(f"{path}: not a readable PDF (damaged or truncated: {error})") from None
    try:
        segments = []
        for number, page in enumerate(document, start=1):
            textpage = page.get_textpage()
            text = textpage.get_text_bounded()
            textpage.close()
            page.close()
            if text.strip():
                segments.append(Segment(text.replace("\r\n", "\n"), {"page": number}))
        pages = len(document)
        title = str((document.get_metadata_dict() or {}).get("Title") or "").strip()
    except pdfium.PdfiumError as error:
        raise BadFileError(f"{path}: not a readable PDF (damaged or truncated: {error})") from None
    finally:
        document.close()
    if not segments:
        raise BadFileError(
            f"{path}: no text layer on any of its {pages} page(s) (scanned images?); "
            "OCR it before ingesting"
        )
    return [Record("", title or path.stem, segments)]
