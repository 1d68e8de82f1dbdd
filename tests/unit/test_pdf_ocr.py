"""A PDF page with no text layer (a scan) is read by OCR when the ``ocr`` extra is installed:
its chunks say ``page`` and ``ocr: True``, pages with a text layer are never OCR'd, and a PDF
with no text found either way is a bad file naming the file and the reason (and the extra, when
it is missing)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from document_files import two_bm25_config, write_scanned_pdf
from parallel_rag.backends.bm25.index import BM25Index
from parallel_rag.studio.documents import BadFileError
from parallel_rag.studio.documents.ocr import _reading_order
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.ingestion.chunk import load_chunks

TEXT_PAGE = "The ferry timetable lists departures from the north pier every hour."
SCANNED_PAGES = [
    [
        "The lighthouse keeper logs the fog signal",
        "every evening at seven o'clock.",
        "Spare lamp wicks are stored in the cellar.",
    ],
    ["Invoice total: 412 euros for the harbour crane", "repair, payable within thirty days."],
]
SCANNED_WORDS = [["lighthouse", "keeper", "fog", "wicks", "cellar"], ["invoice", "crane", "thirty"]]


def scan(lines: list[str]) -> bytes:
    """A page of printed lines as a scanner gives it: pixels only (PNG, A5 at 150 dpi)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (874, 1240), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=28)
    for number, line in enumerate(lines):
        draw.text((90, 120 + number * 48), line, fill=0, font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_mixed_pdf(
    path: Path, scans: list[list[str]] = SCANNED_PAGES, text_page: str | None = TEXT_PAGE
) -> Path:
    """Page 1 with a text layer (unless ``text_page`` is None), then one image-only page per
    entry of ``scans``."""
    from fpdf import FPDF

    pdf = FPDF(format=(148, 210))  # A5, not A4: half the pixels for OCR to read
    pdf.set_title("Harbour Notes")
    pdf.set_font("Helvetica", size=12)
    if text_page is not None:
        pdf.add_page()
        pdf.multi_cell(0, 10, text_page)
    for lines in scans:
        pdf.add_page()
        pdf.image(io.BytesIO(scan(lines)), x=0, y=0, w=148, h=210)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def bad_file_message(path: Path) -> str:
    """The one-line bad-file message ``path`` gets."""
    with pytest.raises(BadFileError) as raised:
        load_chunks(path)
    assert "\n" not in str(raised.value)
    return str(raised.value)


@pytest.fixture(scope="module")
def mixed_chunks(tmp_path_factory):
    return load_chunks(write_mixed_pdf(tmp_path_factory.mktemp("ocr") / "harbour.pdf"))


def test_scanned_pages_are_read_by_ocr_and_say_so_text_pages_are_not(mixed_chunks):
    by_page = {c.metadata["page"]: c for c in mixed_chunks}
    assert sorted(by_page) == [1, 2, 3]
    assert by_page[1].content == TEXT_PAGE and "ocr" not in by_page[1].metadata
    for page, words in zip((2, 3), SCANNED_WORDS, strict=True):
        assert by_page[page].metadata["ocr"] is True
        text = by_page[page].content.lower()
        assert [w for w in words if w not in text] == [], text
    assert {c.metadata["title"] for c in mixed_chunks} == {"Harbour Notes"}


def test_ocr_lines_come_in_reading_order(mixed_chunks):
    text = next(c.content for c in mixed_chunks if c.metadata["page"] == 2).lower()
    assert text.index("lighthouse") < text.index("seven") < text.index("cellar")


def test_reading_order_is_rows_top_to_bottom_each_left_to_right():
    def box(left, top, text):
        return [[left, top], [left + 100, top], [left + 100, top + 30], [left, top + 30]], text, 1

    found = [box(300, 102, "right"), box(10, 200, "next"), box(10, 100, "left")]
    assert _reading_order(found) == "left right\nnext"
    assert _reading_order([]) == ""


def test_without_the_ocr_extra_a_scanned_pdf_is_a_bad_file_naming_the_extra(tmp_path, monkeypatch):
    path = write_scanned_pdf(tmp_path / "scan.pdf")
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # as if not installed
    message = bad_file_message(path)
    assert message.startswith(f"{path}: no text layer on any of its 2 page(s)")
    assert "install parallel-rag[ocr]" in message


def test_a_scan_where_ocr_finds_nothing_is_a_bad_file_naming_it(tmp_path):
    path = write_mixed_pdf(tmp_path / "blank.pdf", scans=[[]], text_page=None)  # a white scan
    message = bad_file_message(path)
    assert message.startswith(f"{path}: no text layer on any of its 1 page(s)")
    assert "OCR found no text" in message


def test_a_blank_page_is_not_sent_to_ocr(tmp_path, monkeypatch):
    """A page with neither text nor an image (a separator page) has nothing to read: OCR,
    seconds a page, is not run on it, and the PDF's text pages are read as usual."""
    from fpdf import FPDF
    from parallel_rag.studio.documents import pdf as pdf_module

    read = []
    monkeypatch.setattr(pdf_module, "page_text", lambda page: read.append(page) or "")
    document = FPDF(format=(148, 210))
    document.set_font("Helvetica", size=12)
    document.add_page()
    document.multi_cell(0, 10, TEXT_PAGE)
    document.add_page()  # blank
    path = tmp_path / "with-blank.pdf"
    document.output(str(path))
    chunks = load_chunks(path)
    assert read == []
    assert {c.metadata["page"] for c in chunks} == {1}
    assert not any(c.metadata.get("ocr") for c in chunks)


def test_a_question_about_a_scanned_page_retrieves_it_after_ingest(tmp_path):
    config, base_dir = two_bm25_config(tmp_path)
    write_mixed_pdf(tmp_path / "docs" / "harbour.pdf")
    report = ingest_paths([tmp_path / "docs"], config, base_dir, progress=False)
    assert report.chunks == 3
    hits = BM25Index.load(base_dir / "idx" / "a").search("Where are the spare lamp wicks?", k=1)
    assert hits[0].chunk.metadata["page"] == 2 and hits[0].chunk.metadata["ocr"] is True
    # the OCR engine (0.5 GB and more) is dropped once conversion is done, before embedding
    from parallel_rag.studio.documents import ocr

    assert ocr._engine is None
