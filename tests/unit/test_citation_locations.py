"""Where a cited chunk sits in its file (page, slide, section) shows on every surface: the
result's citations, the CLI's sources, and the evidence a chat model (generate node or the
router's injected context) reads."""

from __future__ import annotations

from parallel_rag.nodes.generate.citations import GeneratedAnswer, citation, location
from parallel_rag.nodes.generate.evidence import format_evidence
from parallel_rag.nodes.generate.node import GenerateNode
from parallel_rag.studio.cli.output import format_answer
from parallel_rag.studio.router.injection import inject


def document(number: int, **metadata) -> dict:
    return {
        "id": f"chunk-{number}",
        "content": f"Text of chunk {number}.",
        "metadata": metadata,
        "fused_score": 1 / number,
        "fused_rank": number,
        "sources": [
            {"branch": "q0:kw", "view": "q", "view_kind": "original", "retriever": "kw",
             "rank": number, "score": None}
        ],
    }  # fmt: skip


DOCUMENTS = [
    document(1, source="docs/manual.pdf", page=6, title="Manual"),
    document(2, source="docs/deck.pptx", slide=3, section="Next steps"),
    document(3, source="docs/guide.html", section="Growing > Watering"),
    document(4, source="docs/notes.txt"),
    document(5, source="docs/long.pdf", page=2, page_end=3),
]


def test_location_reads_as_people_cite():
    assert [location(d["metadata"]) for d in DOCUMENTS] == [
        "p. 6",
        "slide 3",
        "§ Growing > Watering",
        "",
        "pp. 2-3",
    ]


def test_citations_carry_page_slide_and_section():
    assert citation(1, DOCUMENTS[0]) == {
        "number": 1,
        "id": "chunk-1",
        "source": "docs/manual.pdf",
        "page": 6,
    }
    assert citation(2, DOCUMENTS[1])["slide"] == 3
    assert citation(3, DOCUMENTS[2])["section"] == "Growing > Watering"
    assert set(citation(4, DOCUMENTS[3])) == {"number", "id", "source"}


class CitesFirstAndSecond:
    """A scripted generator: the control flow under test is the node's, not the answer's."""

    def generate(self, query, documents, config):
        return GeneratedAnswer("Seal every 2000 hours [1], hire two engineers [2].", [1, 2])


def test_the_generate_nodes_citations_carry_the_location():
    result = GenerateNode(CitesFirstAndSecond()).invoke({"query": "q", "documents": DOCUMENTS}, {})
    assert [(c["source"], c.get("page"), c.get("slide")) for c in result["citations"]] == [
        ("docs/manual.pdf", 6, None),
        ("docs/deck.pptx", None, 3),
    ]


def test_the_cli_prints_the_page_of_each_source():
    result = {
        "answer": "Seal every 2000 hours [1].",
        "citations": [citation(1, DOCUMENTS[0])],
        "documents": DOCUMENTS,
        "branches": [],
        "warnings": [],
    }
    lines = format_answer(result).splitlines()
    assert lines[3].startswith(" *[1] docs/manual.pdf p. 6  (fused")
    assert lines[4].startswith("  [2] docs/deck.pptx slide 3  (fused")
    assert lines[6].startswith("  [4] docs/notes.txt  (fused")


def test_evidence_for_a_chat_model_and_the_routers_injection_name_the_page():
    evidence = format_evidence(DOCUMENTS, 10_000)
    assert "[1] (source: docs/manual.pdf p. 6)" in evidence
    assert "[3] (source: docs/guide.html § Growing &gt; Watering)" in evidence  # neutralised
    messages = inject(
        [{"role": "user", "content": "How often?"}],
        DOCUMENTS,
        mode="system_prompt",
        max_context_length=10_000,
        query="How often?",
    )
    assert "[1] (source: docs/manual.pdf p. 6)" in messages[0]["content"]
