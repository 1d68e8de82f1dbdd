"""A service manual laid out as typesetters lay manuals out, written by fpdf2: a title page, a
table of contents with dotted leaders and page numbers, a running header on every page
("Chapter 2: Replacing the impeller seal of the pump 4"), a running footer, numbered headings,
and prose the page width wraps. Ingested with the embedded defaults (pypdfium2, BM25, Qdrant
Edge, the packaged MiniLM) and asked through the graph: the extractive answer is the sentence
that answers, never a heading, a running header or footer or a contents line, although those
share the most words with the question. The generator as it selected before (the furniture
left in, wrapped lines cut) answers the same fused documents with them, so the test tells the
two apart."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FOOTER = "Pump Manual, revision B: impeller pumps of the P200 series"
CONTENTS = [
    ("1 Installing the pump", 3),
    ("2 Replacing the impeller seal of the pump", 4),
    ("2.1 How often to replace the impeller seal", 4),
    ("2.2 Tools for replacing the impeller seal", 5),
]
CHAPTERS = [  # (running header, headings, text) a page
    (
        "Chapter 1: Installing the pump",
        ["1 Installing the pump"],
        "Bolt the pump to a level concrete base and connect the inlet hose before the outlet "
        "hose. The pump must stand upright.",
    ),
    (
        "Chapter 2: Replacing the impeller seal of the pump",
        ["2 Replacing the impeller seal of the pump", "2.1 How often to replace the impeller seal"],
        "Replace the impeller seal every 2000 operating hours, or sooner when water drips from "
        "the shaft housing. A worn seal lets water reach the motor bearings and ruins them "
        "within weeks.",
    ),
    (
        "Chapter 2: Replacing the impeller seal of the pump",
        ["2.2 Tools for replacing the impeller seal"],
        "You need a 13 mm socket wrench, a seal puller and a new gasket kit.",
    ),
]


def write_manual(path: Path) -> Path:
    from fpdf import FPDF

    class Manual(FPDF):
        running = ""

        def header(self):
            if self.running:  # the chapter's title and the page number, as LaTeX sets them
                self.set_font("Helvetica", "I", 9)
                self.cell(0, 8, f"{self.running} {self.page_no()}", align="R")
                self.ln(12)

        def footer(self):
            self.set_y(-15)
            self.set_font("Helvetica", "I", 9)
            self.cell(0, 8, FOOTER, align="C")

    def line(text: str, size: int, style: str = "") -> None:
        pdf.set_font("Helvetica", style, size)
        pdf.multi_cell(0, size * 0.6, text, new_x="LMARGIN", new_y="NEXT")

    pdf = Manual()
    pdf.set_title("P200 Pump Service Manual")
    pdf.add_page()
    line("P200 Impeller Pump Service Manual", 20, "B")
    pdf.add_page()
    line("Table of Contents", 14, "B")
    for title, page in CONTENTS:
        line(f"{title} {'. ' * (32 - len(title) // 2)}{page}", 11)
    for running, headings, text in CHAPTERS:
        pdf.running = running
        pdf.add_page()
        for heading in headings:
            line(heading, 13, "B")
        line(text, 11)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


@pytest.fixture(scope="module")
def asked(tmp_path_factory):
    """The manual ingested with the embedded defaults; ask(question) -> (answer now, answer of
    the generator as it selected before, on the same fused documents)."""
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.components import make_generator
    from parallel_rag.graph.loading import default_config_dict, parse_config
    from parallel_rag.studio.ingestion import ingest_paths

    root = tmp_path_factory.mktemp("manual")
    config = parse_config(default_config_dict(), source="embedded defaults")
    ingest_paths([write_manual(root / "docs" / "pump-service.pdf")], config, root, progress=False)
    graph = build_graph(config, base_dir=root)
    before = make_generator(config.generator, None, config.embeddings, base_dir=root)
    before = copy.copy(before)
    before.drop_furniture = before.join_wrapped_lines = False

    def ask(question: str) -> tuple[str, str]:
        result = graph.invoke({"query": question, "top_k": 5})
        return result["answer"], before.generate(question, result["documents"]).answer

    return ask


FURNITURE = [". . .", "Chapter 1", "Chapter 2", FOOTER, "Table of Contents"]
FURNITURE += ["P200 Impeller Pump Service Manual"] + [h for _, hs, _ in CHAPTERS for h in hs]


@pytest.mark.parametrize(
    ("question", "sentence"),
    [
        (
            "How often should the impeller seal of the pump be replaced?",
            "Replace the impeller seal every 2000 operating hours",
        ),
        (
            "Which tools do I need to replace the impeller seal?",
            "You need a 13 mm socket wrench, a seal puller and a new gasket kit.",
        ),
        (
            "How do I install the pump?",
            "Bolt the pump to a level concrete base and connect the inlet hose before the outlet "
            "hose.",
        ),
    ],
)
def test_the_answer_is_the_sentence_not_the_page_furniture(asked, question, sentence):
    answer, before = asked(question)
    assert answer.startswith(sentence), answer
    quoted = [f for f in FURNITURE if f in answer]
    assert not quoted, answer
    # the same documents gave the old selection a heading, running header or contents line
    assert any(f in before for f in FURNITURE), before


def test_a_sentence_the_page_width_cut_is_quoted_whole(asked):
    answer, before = asked("What happens to the motor bearings when the impeller seal is worn?")
    whole = "A worn seal lets water reach the motor bearings and ruins them within weeks."
    assert whole in answer, answer
    assert whole not in before, before
