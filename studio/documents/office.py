"""Word (DOCX) and PowerPoint (PPTX) files.

DOCX: mammoth writes the body as HTML (headings, lists and tables kept), then the HTML path
makes it Markdown, so headings become ``section``. Chosen by bench/converters.py: it found every
heading and table cell where python-docx's paragraphs miss tables and docx2txt loses headings.
PPTX: python-pptx, a segment per slide (``slide`` 1-based, ``section`` its title).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from xml.etree import ElementTree

from parallel_rag.studio.documents.base import BadFileError, Record, Segment, require
from parallel_rag.studio.documents.html import html_to_markdown
from parallel_rag.studio.documents.markdown import SectionIndex

_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"


def _open_package(path: Path, kind: str) -> zipfile.ZipFile:
    if not path.stat().st_size:
        raise BadFileError(f"{path}: empty file (no text)")
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise BadFileError(
            f"{path}: not a readable {kind} (damaged, truncated or password-protected)"
        ) from None


def _core_title(package: zipfile.ZipFile) -> str:
    """``dc:title`` of the Office document's own properties ('' when unset)."""
    try:
        root = ElementTree.fromstring(package.read("docProps/core.xml"))
    except (KeyError, ElementTree.ParseError):
        return ""
    found = root.find(_DC_TITLE)
    return (found.text or "").strip() if found is not None else ""


def convert_docx(path: Path, data: bytes) -> list[Record]:
    mammoth = require("mammoth", path)
    with _open_package(path, "DOCX") as package:
        title = _core_title(package)
    try:
        with path.open("rb") as file:
            html = mammoth.convert_to_html(file).value
    except (KeyError, ValueError, zipfile.BadZipFile, ElementTree.ParseError) as error:
        raise BadFileError(f"{path}: not a readable DOCX ({type(error).__name__})") from None
    markdown, _ = html_to_markdown(html, path)
    if not markdown:
        raise BadFileError(f"{path}: no text in the document")
    title = title or SectionIndex(markdown).first_heading() or path.stem
    return [Record("", title, [Segment(markdown, markdown=True)])]


def _slide_texts(slide) -> list[str]:
    texts = []
    for shape in slide.shapes:
        if shape.has_text_frame and shape.text_frame.text.strip():
            texts.append(shape.text_frame.text.strip())
        elif getattr(shape, "has_table", False) and shape.has_table:
            rows = [" | ".join(c.text for c in row.cells) for row in shape.table.rows]
            texts.append("\n".join(rows))
    return texts


def convert_pptx(path: Path, data: bytes) -> list[Record]:
    pptx = require("pptx", path)
    with _open_package(path, "PPTX") as package:
        title = _core_title(package)
    try:
        deck = pptx.Presentation(str(path))
    except (KeyError, ValueError, zipfile.BadZipFile) as error:
        raise BadFileError(f"{path}: not a readable PPTX ({type(error).__name__})") from None
    segments = []
    for number, slide in enumerate(deck.slides, start=1):
        texts = _slide_texts(slide)
        if not texts:
            continue
        heading = slide.shapes.title.text.strip() if slide.shapes.title is not None else ""
        metadata = {"slide": number, **({"section": heading} if heading else {})}
        segments.append(Segment("\n".join(texts), metadata))
    if not segments:
        raise BadFileError(f"{path}: no text on any slide")
    first = segments[0].metadata.get("section", "")
    return [Record("", title or first or path.stem, segments)]
