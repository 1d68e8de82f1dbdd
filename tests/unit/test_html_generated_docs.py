"""HTML written by documentation generators (texinfo, Sphinx): their navigation panels and
permalink marks are page chrome, left out like ``<nav>``, so a short page's only chunk starts
at its heading and carries its ``section``. The pages are written here in the generators'
own markup (texinfo 6's ``div.header`` with Next/Previous/Up links between ``<hr>``s, texinfo
7's ``nav-panel``, Sphinx's ``headerlink`` ¶ anchors); a real texinfo page is ingested in
``tests/integration/test_conversion_quality.py``."""

from __future__ import annotations

from parallel_rag.studio.documents.html import html_to_markdown
from parallel_rag.studio.documents.markdown import SectionIndex
from parallel_rag.studio.ingestion.chunk import load_chunks

TEXINFO_6 = """<html><head><title>Thread Safety (libdemo)</title></head><body lang="en">
<div class="section" id="Thread-Safety">
<div class="header"><p>
Next: <a href="Memory.html" accesskey="n" rel="next">Memory</a>, Previous: <a href="Closures.html"
 accesskey="p" rel="prev">Closures</a>, Up: <a href="Using.html" accesskey="u" rel="up">Using</a>
 &nbsp; [<a href="Index.html" title="Index" rel="index">Index</a>]</p>
</div>
<hr>
<h3 class="section">2.7 Thread Safety</h3>
<dl><dt><span class="category">Function: </span><em>demo_prep (void)</em>
<a href='#index-demo' class='copiable-anchor'> &para;</a></dt>
<dd><p>Only one thread may prepare a given call interface at a time.</p></dd></dl>
</div>
<hr>
<div class="header"><p>
Next: <a href="Memory.html">Memory</a>, Up: <a href="Using.html">Using</a>
 &nbsp; [<a href="Index.html" title="Index" rel="index">Index</a>]</p>
</div>
</body></html>"""

TEXINFO_7 = """<html><body><div class="nav-panel"><p>Next: <a href="b.html">B</a></p></div>
<h2 class="chapter">3 Memory Usage</h2><p>Closures are mapped twice.</p></body></html>"""

SPHINX = """<html><body><div role="main">
<h1>Policy<a class="headerlink" href="#policy" title="Permalink">¶</a></h1>
<h2>3.6. Module Path<a class="headerlink" href="#path" title="Permalink">¶</a></h2>
<p>Public modules go in dist-packages.</p></div></body></html>"""

NOT_NAVIGATION = """<html><body><div class="header"><h1>Tide tables</h1></div>
<p>High water at noon.</p></body></html>"""


def markdown_of(html: str, tmp_path) -> str:
    return html_to_markdown(html, tmp_path / "page.html")[0]


def test_texinfo_navigation_panels_and_their_rules_are_left_out(tmp_path):
    markdown = markdown_of(TEXINFO_6, tmp_path)
    for chrome in ("Next:", "Previous:", "Up:", "[Index]", "¶", "---"):
        assert chrome not in markdown, chrome
    assert markdown.startswith("### 2.7 Thread Safety")
    assert "Only one thread may prepare" in markdown
    assert markdown_of(TEXINFO_7, tmp_path) == "## 3 Memory Usage\n\nClosures are mapped twice."


def test_sphinx_permalinks_do_not_end_the_section_names(tmp_path):
    markdown = markdown_of(SPHINX, tmp_path)
    assert "¶" not in markdown
    assert SectionIndex(markdown).at(len(markdown)) == "Policy > 3.6. Module Path"


def test_a_short_texinfo_page_is_one_chunk_under_its_heading(tmp_path):
    (tmp_path / "thread-safety.html").write_text(TEXINFO_6, encoding="utf-8")
    chunks = load_chunks(tmp_path / "thread-safety.html")
    assert [c.metadata["section"] for c in chunks] == ["2.7 Thread Safety"]
    assert chunks[0].metadata["title"] == "Thread Safety (libdemo)"


def test_a_header_div_without_page_links_is_content(tmp_path):
    assert markdown_of(NOT_NAVIGATION, tmp_path).startswith("# Tide tables")
