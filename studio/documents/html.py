"""HTML pages: the main content as Markdown (headings become ``section``), page chrome left out.

Chosen by bench/converters.py: BeautifulSoup (lxml parser) drops scripts, styles, navigation,
header, footer, asides and forms, keeps ``<main>`` (else ``<article>``, else ``<body>``) and
markdownify writes it as Markdown. trafilatura left no chrome either and ran 1.5x faster, but
its main-content guess drops text it scores as boilerplate and it took 62% more memory; this
keeps every word of the main element, predictably.
"""

from __future__ import annotations

import re
from pathlib import Path

from parallel_rag.studio.documents.base import BadFileError, Record, Segment, require
from parallel_rag.studio.documents.markdown import SectionIndex

CHROME = ["script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form"]
CHROME_ROLES = ["navigation", "banner", "contentinfo", "search"]
# what documentation generators put around the text, by class: texinfo 7's Next/Previous/Up
# panel, and the permalink marks (Sphinx's, texinfo's) that would end every heading with a ¶
CHROME_CLASSES = ["nav-panel", "headerlink", "copiable-anchor", "copiable-link"]
# texinfo before 7 heads each page with a ``div.header`` of Next/Previous/Up links: dropped
# when it holds such links only, since "header" alone names content on other sites
PAGE_LINKS = ", ".join(f'a[rel~="{rel}"]' for rel in ("next", "prev", "up", "index"))
# a thematic break (``<hr>``) opening or closing the main content only fenced off the chrome
EDGE_BREAKS = re.compile(
    r"\A(?:\s*(?:-{3,}|\*{3,}|_{3,})[ \t]*(?:\n|\Z))+|(?:\n\s*(?:-{3,}|\*{3,}|_{3,})[ \t]*)+\s*\Z"
)


def html_to_markdown(html: str | bytes, path: Path) -> tuple[str, str]:
    """(Markdown of the main content, the page's ``<title>``); bytes are decoded as the page
    declares (``<meta charset>``), else detected."""
    bs4 = require("bs4", path)
    markdownify = require("markdownify", path)
    require("lxml", path)
    soup = bs4.BeautifulSoup(html, "lxml")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(CHROME):
        tag.decompose()
    for tag in soup.find_all(attrs={"role": CHROME_ROLES}):
        tag.decompose()
    for tag in soup.find_all(class_=CHROME_CLASSES):
        tag.decompose()
    for tag in soup.select("div.header"):
        if tag.select_one(PAGE_LINKS) is not None:
            tag.decompose()
    root = soup.find("main") or soup.find("article") or soup.body or soup
    markdown = markdownify.markdownify(
        str(root), heading_style="ATX", strip=["a", "img"], bullets="-"
    )
    return EDGE_BREAKS.sub("", markdown.strip()).strip(), title


def convert_html(path: Path, data: bytes) -> list[Record]:
    if not data.strip():
        raise BadFileError(f"{path}: empty file (no text)")
    if b"\x00" in data:
        raise BadFileError(f"{path}: binary content (NUL bytes) in an HTML file; not ingested")
    markdown, title = html_to_markdown(data, path)
    if not markdown:
        raise BadFileError(f"{path}: no text in the page's main content")
    title = title or SectionIndex(markdown).first_heading() or path.stem
    return [Record("", title, [Segment(markdown, markdown=True)])]
