"""PDF, HTML, DOCX, PPTX and CSV files written by real writers become chunks with their
structure (page, section, slide, title), page chrome left out; bad files are one line naming
the file and the reason, and ingest is all-or-nothing unless told to skip them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from document_files import (
    CHROME_WORDS,
    PDF_PAGES,
    two_bm25_config,
    write_csv,
    write_docx,
    write_encrypted_pdf,
    write_html,
    write_pdf,
    write_pptx,
    write_scanned_pdf,
    write_truncated_pdf,
)
from parallel_rag.studio.documents import BadFileError, MissingExtraError
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.ingestion.chunk import load_chunks
from parallel_rag.studio.ingestion.load import file_id_for

# ---------------------------------------------------------------- structure kept


def test_pdf_chunks_carry_their_page_and_the_document_title(tmp_path):
    chunks = load_chunks(write_pdf(tmp_path / "manual.pdf"))
    assert [c.metadata["page"] for c in chunks] == [1, 2, 3]
    assert [c.content for c in chunks] == PDF_PAGES
    assert {c.metadata["title"] for c in chunks} == {"Pump Manual"}
    assert [c.metadata["chunk_index"] for c in chunks] == [0, 1, 2]


def test_a_pdf_chunk_never_spans_pages(tmp_path):
    long_pages = [f"Page {n} sentence about valves. " * 40 for n in range(1, 4)]
    chunks = load_chunks(write_pdf(tmp_path / "long.pdf", long_pages), chunk_size=300)
    assert len(chunks) > 6
    for chunk in chunks:
        numbers = {int(w) for w in chunk.content.split() if w.isdigit()}
        assert numbers == {chunk.metadata["page"]}, chunk.content
    assert sorted({c.metadata["page"] for c in chunks}) == [1, 2, 3]


def test_html_keeps_the_main_content_with_sections_and_drops_chrome(tmp_path):
    chunks = load_chunks(write_html(tmp_path / "garden.html"), chunk_size=80, chunk_overlap=0)
    text = "\n".join(c.content for c in chunks)
    assert "six hours of direct sun" in text and "twice a week" in text
    assert not [w for w in CHROME_WORDS if w in text]
    assert {c.metadata["title"] for c in chunks} == {"Garden Guide"}  # from <title>
    by_text = {c.content: c.metadata.get("section") for c in chunks}
    watering = next(s for t, s in by_text.items() if "twice a week" in t)
    assert watering == "Growing tomatoes > Watering"


def test_docx_headings_become_sections_and_tables_are_kept(tmp_path):
    chunks = load_chunks(write_docx(tmp_path / "bike.docx"), chunk_size=60, chunk_overlap=0)
    assert {c.metadata["title"] for c in chunks} == {"Bicycle Handbook"}  # core properties
    pads = next(c for c in chunks if "brake pads" in c.content)
    assert pads.metadata["section"] == "Bicycle care > Brakes"
    chain = next(c for c in chunks if "muddy ride" in c.content)
    assert chain.metadata["section"] == "Bicycle care"
    assert any("4.5 bar" in c.content for c in chunks)


def test_pptx_chunks_carry_their_slide(tmp_path):
    chunks = load_chunks(write_pptx(tmp_path / "deck.pptx"))
    assert [(c.metadata["slide"], c.metadata["section"]) for c in chunks] == [
        (1, "Quarterly results"),
        (2, "Next steps"),
    ]
    assert "twelve percent" in chunks[0].content and "two engineers" in chunks[1].content


def test_csv_rows_are_records_like_jsonl_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_csv(tmp_path / "faq.csv")
    first, second = load_chunks(path)
    assert first.content == "Opening hours\nThe library opens at nine."
    assert first.metadata["source"] == "faq.csv#r1" and first.metadata["record_id"] == "r1"
    assert first.metadata["team"] == "front desk"  # other columns are metadata
    assert second.content.endswith("capped at five dollars.")
    assert first.metadata["file_id"] == second.metadata["file_id"] == file_id_for(path)


def test_markdown_chunks_carry_their_heading_path(tmp_path):
    path = tmp_path / "guide.md"
    path.write_text(
        "# Guide\n\nIntro text here.\n\n## Setup\n\nInstall it.\n\n```\n# not a heading\n```\n\n"
        "### Linux\n\nUse the package manager.\n",
        encoding="utf-8",
    )
    chunks = load_chunks(path, chunk_size=30, chunk_overlap=0)
    sections = {c.content.splitlines()[-1]: c.metadata.get("section") for c in chunks}
    assert sections["Intro text here."] == "Guide"
    assert sections["Use the package manager."] == "Guide > Setup > Linux"


# ---------------------------------------------------------------- bad files


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (write_truncated_pdf, "not a readable PDF (damaged or truncated"),
        (write_encrypted_pdf, "encrypted PDF"),
        (write_scanned_pdf, "no text layer on any of its 2 page(s)"),
    ],
    ids=["truncated", "encrypted", "scanned"],
)
def test_bad_pdfs_are_one_line_naming_the_file_and_the_reason(tmp_path, monkeypatch, make, reason):
    # without the ocr extra (tests/unit/test_pdf_ocr.py reads scanned pages with it)
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    path = make(tmp_path / "bad.pdf")
    with pytest.raises(BadFileError) as raised:
        load_chunks(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and reason in message and "\n" not in message


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.md", b"", "empty file"),
        ("blank.txt", b" \n\t\n", "empty file"),
        ("binary.txt", bytes(range(256)) * 4, "binary content"),
        ("empty.pdf", b"", "empty file"),
        ("empty.docx", b"", "empty file"),
        ("fake.docx", b"this is not a zip", "not a readable DOCX"),
        ("fake.pptx", b"PK\x03\x04 broken", "not a readable PPTX"),
        ("fake.pdf", b"%PDF-1.7 garbage", "not a readable PDF"),
        ("notext.csv", b"id,body\n1,hello\n", "needs a 'text' (or 'content') column"),
    ],
)
def test_bad_files_of_every_kind_name_the_file_and_the_reason(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BadFileError) as raised:
        load_chunks(path)
    assert str(raised.value).startswith(f"{path}: ") and reason in str(raised.value)


def test_a_file_over_the_size_cap_is_a_bad_file(tmp_path):
    path = write_pdf(tmp_path / "big.pdf")
    with pytest.raises(BadFileError, match=r"big\.pdf: .* over the 0\.001 MB size cap"):
        load_chunks(path, max_file_mb=0.001)


def test_a_missing_converter_package_names_the_extra(tmp_path, monkeypatch):
    path = write_pdf(tmp_path / "manual.pdf")
    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # what an absent package imports as
    with pytest.raises(MissingExtraError) as raised:
        load_chunks(path)
    assert "pip install 'parallel-rag[documents]'" in str(raised.value)


# ---------------------------------------------------------------- all-or-nothing or skip


def _mixed_folder(tmp_path: Path) -> tuple[Path, list[Path]]:
    folder = tmp_path / "docs"
    write_pdf(folder / "manual.pdf")
    write_html(folder / "garden.html")
    bad = [write_encrypted_pdf(folder / "locked.pdf"), folder / "empty.txt"]
    bad[1].write_text("", encoding="utf-8")
    return folder, bad


def test_a_bad_file_stops_the_ingest_before_anything_is_written_and_all_are_listed(tmp_path):
    config, base_dir = two_bm25_config(tmp_path)
    folder, bad = _mixed_folder(tmp_path)
    with pytest.raises(BadFileError) as raised:
        ingest_paths([folder], config, base_dir, progress=False)
    message = str(raised.value)
    assert "2 bad file(s), nothing was ingested" in message
    assert all(f"{path}: " in message for path in bad)
    assert not (tmp_path / "idx").exists()


def test_skip_bad_files_indexes_the_others_and_lists_the_skipped(tmp_path):
    config, base_dir = two_bm25_config(tmp_path)
    folder, bad = _mixed_folder(tmp_path)
    report = ingest_paths([folder], config, base_dir, progress=False, skip_bad_files=True)
    assert sorted(report.files) == [str(folder / "garden.html"), str(folder / "manual.pdf")]
    assert report.chunks == 4  # three PDF pages, one HTML page
    assert [line.split(": ")[0] for line in report.skipped] == [str(p) for p in sorted(bad)]
