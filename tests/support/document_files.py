"""Real documents written by real writers (fpdf2, python-docx, python-pptx), with known text at
known places, and the bad files ingest must name: for the format tests and the CLI tests."""

from __future__ import annotations

import io
from pathlib import Path

PDF_PAGES = [
    "The pump manual starts here. Read the safety notes before installing the pump.",
    "Installation: bolt the pump to a level concrete base and connect the inlet hose.",
    "Maintenance: replace the impeller seal every 2000 operating hours.",
]
HTML_PAGE = """<!doctype html>
<html><head><title>Garden Guide</title>
<style>body { color: red; }</style>
<script>var tracking = "SCRIPTCHROME";</script></head>
<body>
<header><p>HEADERCHROME site banner</p></header>
<nav><a href="/">NAVCHROME Home</a> <a href="/about">About</a></nav>
<main>
<h1>Growing tomatoes</h1>
<p>Tomatoes need six hours of direct sun each day.</p>
<h2>Watering</h2>
<p>Water tomatoes deeply twice a week at the roots.</p>
</main>
<aside>ASIDECHROME related links</aside>
<footer>FOOTERCHROME copyright</footer>
</body></html>
"""
CHROME_WORDS = ["SCRIPTCHROME", "HEADERCHROME", "NAVCHROME", "ASIDECHROME", "FOOTERCHROME"]


def write_pdf(path: Path, pages: list[str] = PDF_PAGES, *, title: str = "Pump Manual") -> Path:
    """A PDF with one paragraph of known text per page and a document title."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def write_encrypted_pdf(path: Path) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.set_font("Helvetica", size=12)
    pdf.add_page()
    pdf.multi_cell(0, 10, "Secret text behind a password.")
    pdf.output(str(path))
    return path


def write_scanned_pdf(path: Path) -> Path:
    """A PDF whose pages are images only (what a scanner makes): no text layer."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (400, 120), "white")
    ImageDraw.Draw(image).text((10, 50), "Scanned words, pixels only", fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.image(io.BytesIO(buffer.getvalue()), x=10, y=10, w=180)
    pdf.output(str(path))
    return path


def write_truncated_pdf(path: Path) -> Path:
    """The first 40% of a valid PDF: a download cut short."""
    whole = write_pdf(path.with_name("whole-" + path.name)).read_bytes()
    path.with_name("whole-" + path.name).unlink()
    path.write_bytes(whole[: len(whole) * 2 // 5])
    return path


def write_docx(path: Path) -> Path:
    """Headings (a section path), a paragraph under each, a table, and a core title."""
    import docx

    document = docx.Document()
    document.core_properties.title = "Bicycle Handbook"
    document.add_heading("Bicycle care", level=1)
    document.add_paragraph("Clean the chain after every muddy ride.")
    document.add_heading("Brakes", level=2)
    document.add_paragraph("Check the brake pads for wear each month.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "tyre pressure", "4.5 bar"
    path.parent.mkdir(parents=True, exist_ok=True)
    document.save(str(path))
    return path


def write_pptx(path: Path) -> Path:
    """Two slides with a title and a bullet each."""
    import pptx

    deck = pptx.Presentation()
    for title, bullet in [
        ("Quarterly results", "Revenue grew by twelve percent."),
        ("Next steps", "Hire two engineers for the data team."),
    ]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = bullet
    path.parent.mkdir(parents=True, exist_ok=True)
    deck.save(str(path))
    return path


def write_html(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HTML_PAGE, encoding="utf-8")
    return path


def write_csv(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "id,title,text,team\n"
        "r1,Opening hours,The library opens at nine.,front desk\n"
        'r2,Fines,"Late books cost ten cents a day, capped at five dollars.",billing\n',
        encoding="utf-8",
    )
    return path


def two_bm25_config(tmp_path: Path):
    """A model-free configuration (two BM25 indexes, ingest writes both) and its base dir."""
    import yaml
    from parallel_rag.graph.loading import load_config

    retrievers = [
        {"name": name, "backend": "bm25", "backend_config": {"index_path": f"idx/{name}"}}
        for name in ("a", "b")
    ]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "parallel-rag.yaml"
    path.write_text(yaml.safe_dump({"retrievers": retrievers}), encoding="utf-8")
    return load_config(path)
