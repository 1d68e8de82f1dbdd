"""PDF text layers, a segment per page (``page`` is 1-based), with pypdfium2.

Chosen by bench/converters.py: 10x pypdf's pages/s and 37x pdfplumber's at the same or lower
peak RSS, and it joins words hyphenated across lines. A page with no text layer (a scanned
image) is read by OCR when the ``ocr`` extra is installed (see ``ocr.py``): its segment says
``"ocr": True`` beside its page; a page with a text layer is never OCR'd. A damaged, truncated
or encrypted PDF, or one with no text on any page (no text layer and no OCR, or OCR found
none), is a bad file named with the reason.
"""

from __future__ import annotations

from pathlib import Path

from parallel_rag.studio.documents.base import BadFileError, Record, Segment, require
from parallel_rag.studio.documents.ocr import OCR_EXTRA, ocr_available, page_text

# PDFium's error codes (FPDF_GetLastError) as pypdfium2 words them
_PASSWORD = "password"


def has_image(pdfium, page) -> bool:
    """Whether the page draws an image: a page without one (a blank separator page) has
    nothing for OCR to read, and OCR costs seconds a page."""
    images = page.get_objects(filter=[pdfium.raw.FPDF_PAGEOBJ_IMAGE], max_depth=3)
    return next(iter(images), None) is not None


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
    ocr_tried = False
    try:
        segments = []
        for number, page in enumerate(document, start=1):
            textpage = page.get_textpage()
            text = textpage.get_text_bounded()
            textpage.close()
            metadata = {"page": number}
            if not text.strip() and has_image(pdfium, page) and ocr_available():
                text = page_text(page)
                metadata["ocr"] = ocr_tried = True
            page.close()
            if text.strip():
                segments.append(Segment(text.replace("\r\n", "\n"), metadata))
        pages = len(document)
        title = str((document.get_metadata_dict() or {}).get("Title") or "").strip()
    except pdfium.PdfiumError as error:
        raise BadFileError(f"{path}: not a readable PDF (damaged or truncated: {error})") from None
    finally:
        document.close()
    if not segments:
        how = (
            "and OCR found no text on them either (blank or unreadable scans?)"
            if ocr_tried
            else f"(scanned images?); install parallel-rag[{OCR_EXTRA}] to read them, "
            "or OCR it before ingesting"
        )
        raise BadFileError(f"{path}: no text layer on any of its {pages} page(s) {how}")
    return [Record("", title or path.stem, segments)]
