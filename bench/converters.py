"""Document converters compared on the same files: pages (or documents) per second, CPU, peak
RSS and how much text each gets out, to choose the ones ``parallel-rag ingest`` uses.

Run: ``python -m bench.converters`` (writes bench/CONVERTER-RESULTS.md and, for reading by
eye, bench/out/converter-samples/). Every candidate runs in its own child process, so its peak RSS
is its own (the child's ``ru_maxrss``, which includes the interpreter and imports: the
baseline row ``none`` is a child that imports nothing). Files: PDFs and HTML pages that ship on
this machine (GNU and freedesktop manuals in /usr/share/doc, the Rust toolchain's HTML books),
plus a DOCX and a PPTX written here by python-docx / python-pptx with known headings. Imports
nothing from the other bench sections. The candidates not shipped in the ``documents`` extra
(pypdf, pdfplumber, trafilatura, docx2txt) are rows only where installed by hand.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "out" / "converter-samples"
RUST_HTML = Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
]
HTMLS = [
    RUST_HTML / "rustdoc/how-to-write-documentation.html",
    RUST_HTML / "rustdoc/command-line-arguments.html",
    RUST_HTML / "rustdoc/unstable-features.html",
    RUST_HTML / "rustc/platform-support.html",
    RUST_HTML / "rustc/lints/groups.html",
]
ROUNDS = 3  # each candidate converts its files this many times (wall and CPU over all rounds)
# words of the Rust books' page chrome (sidebar, header buttons, keyboard help): none belongs in
# the main content
CHROME_WORDS = ["Keyboard shortcuts", "Change theme", "Search (`/`)", "Press ← or →"]


# ---------------------------------------------------------------- candidates (child side)


def pdf_pypdfium2(path: Path) -> list[str]:
    import pypdfium2

    document = pypdfium2.PdfDocument(str(path))
    try:
        return [page.get_textpage().get_text_bounded() for page in document]
    finally:
        document.close()


def pdf_pypdf(path: Path) -> list[str]:
    import pypdf

    return [page.extract_text() or "" for page in pypdf.PdfReader(str(path)).pages]


def pdf_pdfplumber(path: Path) -> list[str]:
    import pdfplumber

    with pdfplumber.open(str(path)) as pdf:
        return [page.extract_text() or "" for page in pdf.pages]


def lc_pypdfium2(path: Path) -> list[str]:
    from langchain_community.document_loaders import PyPDFium2Loader

    return [d.page_content for d in PyPDFium2Loader(str(path)).load()]


def lc_pypdf(path: Path) -> list[str]:
    from langchain_community.document_loaders import PyPDFLoader

    return [d.page_content for d in PyPDFLoader(str(path)).load()]


def html_trafilatura(path: Path) -> list[str]:
    import trafilatura

    text = trafilatura.extract(
        path.read_text("utf-8"), output_format="markdown", include_tables=True, favor_recall=True
    )
    return [text or ""]


def html_bs4_markdownify(path: Path) -> list[str]:
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    soup = BeautifulSoup(path.read_text("utf-8"), "lxml")
    for tag in soup(["script", "style", "noscript", "nav", "header", "footer", "aside", "form"]):
        tag.decompose()
    root = soup.find("main") or soup.find("article") or soup.body or soup
    return [markdownify(str(root), heading_style="ATX", strip=["a", "img"], bullets="-")]


def lc_bshtml(path: Path) -> list[str]:
    from langchain_community.document_loaders import BSHTMLLoader

    return [d.page_content for d in BSHTMLLoader(str(path), open_encoding="utf-8").load()]


def docx_python_docx(path: Path) -> list[str]:
    import docx

    lines = []
    for paragraph in docx.Document(str(path)).paragraphs:
        style = paragraph.style.name if paragraph.style is not None else ""
        level = style.removeprefix("Heading ") if style.startswith("Heading ") else ""
        lines.append(("#" * int(level) + " " if level.isdigit() else "") + paragraph.text)
    return ["\n\n".join(lines)]


def docx_mammoth(path: Path) -> list[str]:
    import mammoth
    from markdownify import markdownify

    with path.open("rb") as file:
        html = mammoth.convert_to_html(file).value
    return [markdownify(html, heading_style="ATX")]


def lc_docx2txt(path: Path) -> list[str]:
    from langchain_community.document_loaders import Docx2txtLoader

    return [d.page_content for d in Docx2txtLoader(str(path)).load()]


def pptx_python_pptx(path: Path) -> list[str]:
    import pptx

    slides = []
    for slide in pptx.Presentation(str(path)).slides:
        texts = [s.text_frame.text for s in slide.shapes if s.has_text_frame]
        slides.append("\n".join(texts))
    return slides


def none(path: Path) -> list[str]:
    return [""]


CANDIDATES = {
    "pdf": ["pdf_pypdfium2", "pdf_pypdf", "pdf_pdfplumber", "lc_pypdfium2", "lc_pypdf"],
    "html": ["html_trafilatura", "html_bs4_markdownify", "lc_bshtml"],
    "docx": ["docx_python_docx", "docx_mammoth", "lc_docx2txt"],
    "pptx": ["pptx_python_pptx"],
}


CHOICE = """
## What ingest uses, and why

- **PDF: pypdfium2** (a segment per page). Fastest by an order of magnitude in CPU per page
  (pypdf ~10x, pdfplumber ~40x more CPU), no more memory than the bare interpreter, and read
  by eye it joins words hyphenated across lines (pypdf keeps "manip-/ulation"). LangChain's
  PyPDFium2Loader wraps the same library at ~35 MB more RSS (its imports).
- **HTML: BeautifulSoup (lxml) + markdownify**, dropping script/style/nav/header/footer/aside/
  form and keeping `<main>` (else `<article>`, else `<body>`). No chrome word left, the same
  text as trafilatura once links are stripped, ~30 MB less RSS; trafilatura is ~1.5x faster
  but picks the main content by scoring paragraphs as boilerplate (a heuristic), where this
  keeps every word of the main element; BSHTMLLoader keeps the sidebar and header (chrome
  words left) and loses headings. The machine was loaded (see load): compare CPU columns.
- **DOCX: mammoth + markdownify**: every heading (as Markdown, so `section` works) and every
  table cell; python-docx's paragraphs miss the tables, docx2txt (Docx2txtLoader) is fastest
  but loses the headings, so no `section`.
- **PPTX: python-pptx**, a segment per slide.
"""


def child(name: str, files: list[str]) -> None:
    """Convert ``files`` ROUNDS times with ``name``; print one JSON line of measurements."""
    convert = globals()[name]
    try:
        convert(Path(files[0]))  # imports (and warms up) the converter; timed again below
    except ImportError as error:
        print(json.dumps({"missing": error.name}))
        return
    started, cpu = time.perf_counter(), time.process_time()
    units, chars, outputs = 0, 0, []
    for round_number in range(ROUNDS):
        for file in files:
            texts = convert(Path(file))
            if round_number == 0:
                units += len(texts)
                chars += sum(len(t) for t in texts)
                outputs.append(texts)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "cpu": cpu, "units": units, "chars": chars,
                      "rss_mb": rss_mb, "outputs": outputs}))  # fmt: skip


# ---------------------------------------------------------------- files and table (parent side)


def write_office_files(folder: Path) -> tuple[Path, Path]:
    """A 30-section DOCX and a 30-slide PPTX with known headings and text."""
    import docx
    import pptx

    folder.mkdir(parents=True, exist_ok=True)
    document = docx.Document()
    document.core_properties.title = "Converter bench manual"
    for number in range(1, 31):
        document.add_heading(f"Chapter {number}", level=1)
        document.add_heading(f"Part {number}.1", level=2)
        for sentence in range(6):
            document.add_paragraph(f"Paragraph {sentence} of chapter {number} explains item " * 3)
        table = document.add_table(rows=2, cols=2)
        table.cell(0, 0).text, table.cell(1, 1).text = f"cell A{number}", f"cell B{number}"
    docx_path = folder / "manual.docx"
    document.save(str(docx_path))
    deck = pptx.Presentation()
    for number in range(1, 31):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Slide title {number}"
        slide.placeholders[1].text = f"Bullet one of slide {number}\nBullet two of slide {number}"
    pptx_path = folder / "deck.pptx"
    deck.save(str(pptx_path))
    return docx_path, pptx_path


def run_child(name: str, files: list[Path]) -> dict:
    command = [sys.executable, "-m", "bench.converters", "--child", name, *map(str, files)]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=HERE.parent, check=True, timeout=900
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def fidelity(kind: str, outputs: list[list[str]]) -> str:
    """What can be checked without eyes: chrome words left in HTML; known text recovered in
    the DOCX/PPTX written here; for PDFs, the pages with no text."""
    joined = "\n".join(t for texts in outputs for t in texts)
    if kind == "html":
        left = [w for w in CHROME_WORDS if w in joined]
        return f"chrome words left: {len(left)}/{len(CHROME_WORDS)}"
    if kind == "docx":
        found = sum(f"Chapter {n}" in joined and f"cell B{n}" in joined for n in range(1, 31))
        headings = joined.count("# Chapter ")
        return f"chapters+tables found {found}/30; headings as markdown {headings}/30"
    if kind == "pptx":
        found = sum(f"Bullet two of slide {n}" in joined for n in range(1, 31))
        return f"slides with text {found}/30"
    empty = sum(not t.strip() for texts in outputs for t in texts)
    return f"pages without text: {empty}"


PACKAGES = ["pypdfium2", "pypdf", "pdfplumber", "beautifulsoup4", "markdownify", "trafilatura",
            "mammoth", "python-docx", "docx2txt", "python-pptx", "langchain-community"]  # fmt: skip


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in PACKAGES:
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return ", ".join(found)


# questions written from the text of files this project did not write, with where the answer is
QUESTIONS = [
    ("Is the ASN.1 parser of libtasn1 case sensitive?", "libtasn1.pdf", 5),
    ("What does asn1Parser generate from a file of ASN.1 definitions?", "libtasn1.pdf", 8),
    ("What does asn1Decoding generate from a binary DER file?", "libtasn1.pdf", 10),
    ("What magic string does the MIME magic file start with?", "shared-mime-info-spec.pdf", 9),
    ("Which extended attribute can store a file's MIME type?", "shared-mime-info-spec.pdf", 14),
    ("What is inode/mount-point a subclass of?", "shared-mime-info-spec.pdf", 16),
    ("Which crate's front-page documentation is the example of good crate docs?",
     "how-to-write-documentation.html", None),
    ("Which rustdoc flag sets the crate name?", "command-line-arguments.html", None),
]  # fmt: skip


def citation_rows(files: list[Path]) -> list[str]:
    """Ingest ``files`` with the embedded defaults into a temporary folder and ask QUESTIONS:
    does the first citation name the right file (and page)?"""
    import tempfile

    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.loading import load_config
    from parallel_rag.nodes.generate.citations import source_label
    from parallel_rag.studio.ingestion import ingest_paths

    rows = [
        "| question | expected | first citation | right file | right page |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        config, _ = load_config(None)
        ingest_paths(files, config, Path(folder), progress=False)
        graph = build_graph(config, base_dir=Path(folder))
        for question, name, page in QUESTIONS:
            result = graph.invoke({"query": question, "top_k": 5})
            cited = result["citations"][0] if result["citations"] else None
            document = result["documents"][cited["number"] - 1] if cited else None
            label = source_label(document).rsplit("/", 1)[-1] if document else "(none)"
            right_file = bool(cited) and str(cited["source"]).endswith(name)
            right_page = (
                "-" if page is None else ("yes" if cited and cited.get("page") == page else "no")
            )
            expected = f"{name} p. {page}" if page else name
            file_mark = "yes" if right_file else "no"
            rows.append(f"| {question} | {expected} | {label} | {file_mark} | {right_page} |")
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    SAMPLES.mkdir(parents=True, exist_ok=True)
    docx_path, pptx_path = write_office_files(SAMPLES / "inputs")
    files = {
        "pdf": [p for p in PDFS if p.exists()],
        "html": [p for p in HTMLS if p.exists()],
        "docx": [docx_path],
        "pptx": [pptx_path],
    }
    baseline = run_child("none", [docx_path])
    rows = [
        "| format | converter | units | units/s | units/CPU-s | wall s | CPU s | peak RSS MB "
        "| chars | fidelity (checked) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| - | none (interpreter only) | - | - | - | - | - | {baseline['rss_mb']:.0f} | - | - |",
    ]
    for kind, names in CANDIDATES.items():
        for name in names:
            measured = run_child(name, files[kind])
            if "missing" in measured:
                rows.append(f"| {kind} | {name} | not installed: {measured['missing']} |")
                continue
            rate = measured["units"] * ROUNDS / measured["wall"]
            per_cpu = measured["units"] * ROUNDS / max(measured["cpu"], 1e-9)
            rows.append(
                f"| {kind} | {name} | {measured['units']} | {rate:.1f} | {per_cpu:.1f} "
                f"| {measured['wall']:.2f} "
                f"| {measured['cpu']:.2f} | {measured['rss_mb']:.0f} | {measured['chars']} "
                f"| {fidelity(kind, measured['outputs'])} |"
            )
            sample = "\n\n=====\n\n".join(t for texts in measured["outputs"] for t in texts)
            (SAMPLES / f"{name}.txt").write_text(sample, encoding="utf-8")
            print(rows[-1], flush=True)
    listed = "\n".join(
        f"- {kind}: " + ", ".join(p.name for p in paths) for kind, paths in files.items()
    )
    text = (
        "# Converters measured\n\n"
        f"`python -m bench.converters` on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f} at start; "
        f"{ROUNDS} rounds per candidate, each in its own process. Units: pages (PDF), "
        "documents (HTML, DOCX), slides (PPTX).\n\nFiles:\n"
        + listed
        + "\n\n"
        + "\n".join(rows)
        + "\n\n## Cited to the right file and page\n\nThe PDFs and HTML pages above ingested "
        "with the embedded defaults (packaged MiniLM, Qdrant Edge, BM25, extractive answers); "
        "questions written from their text:\n\n"
        + "\n".join(citation_rows(files["pdf"] + files["html"]))
        + "\n\nVersions: "
        + versions()
        + "\n"
        + CHOICE
    )
    (HERE / "CONVERTER-RESULTS.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
    else:
        main()
