"""Page furniture is never an answer sentence: headings, running headers and footers,
contents and index lines, as the text layers of real manuals give them (the lines below are
quoted from libtasn1's, bzip2's, fontconfig's and Nettle's manuals, the CRC paper in zlib's
documentation and the Rust standard library's rustdoc pages, as pypdfium2 and the HTML converter
read them), while the sentences beside them that answer stay. And a sentence a PDF cut at a line
end is quoted whole."""

from __future__ import annotations

import pytest
from parallel_rag.nodes.generate.extractive import ExtractiveGenerator
from parallel_rag.nodes.generate.furniture import Furniture, continues, read_pieces

OLD = {"drop_furniture": False, "join_wrapped_lines": False}  # the selection before


def kept(content: str, metadata: dict | None = None, others: list[dict] = ()) -> list[str]:
    """The sentences of ``content`` that are text, not furniture."""
    document = {"content": content, "metadata": metadata or {}}
    return [p.text for p in Furniture([document, *others]).sentences(document)]


@pytest.mark.parametrize(
    "line",
    [
        "Chapter 2: ASN.1 structure handling 4",  # libtasn1's running header, page 4
        "Appendix A: Copying Information 29",
        "4 Chapter 3: Utilities and their options",  # a running header on an even page
        "Header file libtasn1.h. . . . . . . . . . . . . . . . . . . . . . . . . . . .",
        "RECOVERING DATA FROM DAMAGED FILES . . . . . . . . . . . . . . . . . . . . . . 9",
        "3.1 Incremental CRC computation . . . . . . . . . . . . . . . . . . .",
        "3 CRC tricks and tips 4",  # a contents line without leaders
        "5.4 Performance of CRC algorithms",  # a numbered heading in the text
        "2.1 How often to replace the impeller seal",
        "Recovering Data From Damaged Compressed Files",  # a title-case heading
    ],
)
def test_headings_running_headers_and_contents_lines_are_furniture(line):
    assert kept(line) == []


@pytest.mark.parametrize(
    "line",
    [
        "The header file of this library is libtasn1.h.",
        "ASN1_MAX_NAME_SIZE is the maximum number of characters allowed for an ASN.1 identifier.",
        "CACHE 16 Watch cache files being written",  # a row of FC_DEBUG's table
        "-s, --strict use strict DER decoding",
        "A mutual exclusion primitive useful for protecting shared data",  # rustdoc's summary
        "Originally written 2001 by Niels Möller, updated 2017.",
        "2 to indicate a corrupt compressed file, 3 for an internal consistency error (eg, bug)",
        "Chapter 2 explains how the ASN.1 structures are handled.",  # a verb: a sentence
    ],
)
def test_sentences_that_answer_stay(line):
    assert kept(line) == [line]


def test_a_line_a_sentence_runs_through_is_no_heading():
    # "In 2005, Kouvanis and Berry [KB05]" reads like a title but the next line continues it
    crc = "In 2005, Kouvanis and Berry [KB05]\nshowed how to compute CRCs eight bytes at a time."
    assert kept(crc)[0] == "In 2005, Kouvanis and Berry [KB05]"
    # and a line that continues an open one is part of that sentence
    licence = (
        "terms of the GNU Free Documentation License, Version 1.3 or any later version\n"
        "published by the Free Software Foundation; with no Invariant Sections, no\n"
        "Front-Cover Texts, and no Back-Cover Texts."
    )
    assert len(kept(licence)) == 3


def test_code_is_never_furniture():
    # zpipe.c's change log, inside a fenced block: version numbers, not section numbers
    code = "```\n1.4  11 Dec 2005  Add hack to avoid MSDOS end-of-line conversions\n```"
    assert kept(code) == ["1.4  11 Dec 2005  Add hack to avoid MSDOS end-of-line conversions"]


def test_a_line_that_is_the_chunks_section_heading_or_title_is_a_heading():
    metadata = {
        "title": "Mutex in std::sync - Rust",
        "section": "Struct Mutex > Implementations > Poisoning of a mutex after a panic",
    }
    content = (
        "Poisoning of a mutex after a panic\n"
        "A mutex becomes poisoned if the thread holding it has panicked."
    )
    assert kept(content, metadata) == [
        "A mutex becomes poisoned if the thread holding it has panicked."
    ]
    # the same words in a sentence of their own are kept
    assert kept(content, {}) == content.splitlines()


def test_a_line_coming_back_on_several_pages_is_a_running_header():
    def page(number: int) -> dict:
        text = f"nettle: a low-level cryptographic library {number}\nSome text of page {number}."
        return {"content": text, "metadata": {"source": "nettle.pdf", "page": number}}

    pages = [page(12), page(13)]
    assert kept(pages[0]["content"], pages[0]["metadata"], pages[1:]) == ["Some text of page 12."]
    # seen on one page only, the same line is left alone: nothing says it repeats
    assert kept(pages[0]["content"], pages[0]["metadata"]) == [
        "nettle: a low-level cryptographic library 12",
        "Some text of page 12.",
    ]


# libtasn1's manual, pages 7 and 35 (the index) as pypdfium2 reads them
LIBRARY_NOTES = """Chapter 2: ASN.1 structure handling 4
2.4 Library Notes
The header file of this library is libtasn1.h.
The main type used in it is asn1_node, and it's used to store the ASN.1 definitions and
structures (instances)."""
INDEX = """Header file libtasn1.h. . . . . . . . . . . . . . . . . . . . . . . . . . . . 4
Main type asn1 node. . . . . . . . . . . . . . . . . . . . . . . . . . . . . . 4
Supported ASN.1 types, list of . . . . . . . . . . . . . . . . . . . . . . . 2"""
CONTENTS = """Table of Contents
2 ASN.1 structure handling . . . . . . . . . . . . . . . . . . . . . . . 2
2.4 Library Notes . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . 4"""


def manual() -> list[dict]:
    pages = [(7, LIBRARY_NOTES), (35, INDEX), (3, CONTENTS)]
    return [  # the metadata ingest gives a PDF's pages
        {
            "id": f"p{n}",
            "content": text,
            "metadata": {"source": "libtasn1.pdf", "title": "Libtasn1", "page": n},
        }
        for n, text in pages
    ]


def test_the_answer_quotes_the_sentence_not_the_index_nor_the_running_header():
    question = "What is the header file of the libtasn1 library?"
    answer = ExtractiveGenerator().generate(question, manual()).answer
    assert answer.startswith("The header file of this library is libtasn1.h.")
    assert ". . ." not in answer and "Chapter 2" not in answer
    # the selection before quoted the index line beside it: this is what the filter removes
    before = ExtractiveGenerator(**OLD).generate(question, manual()).answer
    assert ". . ." in before


def test_a_sentence_cut_at_a_line_end_is_quoted_whole():
    basics = {  # libffi's manual, "2.1 The Basics", as the HTML converter wraps it
        "content": "The first thing you must do is create an `ffi_cif` object that\n"
        "matches the signature of the function you wish to call. This is a\n"
        "separate step because it is common to make multiple calls using a\n"
        "single `ffi_cif`. The *cif* in `ffi_cif` stands for\n"
        "Call InterFace. To prepare a call interface object, use the function\n"
        "`ffi_prep_cif`.",
        "metadata": {"section": "2.1 The Basics"},
    }
    question = "What does the cif in ffi_cif stand for?"
    answer = ExtractiveGenerator().generate(question, [basics]).answer
    assert "The *cif* in `ffi_cif` stands for Call InterFace." in answer
    assert "Call InterFace" not in ExtractiveGenerator(**OLD).generate(question, [basics]).answer


def test_table_rows_and_list_items_are_not_joined():
    table = (  # fontconfig's FC_DEBUG table after its prose
        "FC_DEBUG is used to output the detailed debugging messages, with the value set\n"
        "to the sum of the values of the messages you want to see printed here. The\n"
        "debugging output goes to stdout by default; the values are single bits that\n"
        "can be added together to select several kinds of messages at once, as the\n"
        "table below lists them (the name, the value and the meaning of each):\n"
        "MATCH 1 Brief information about font matching\n"
        "CACHE 16 Watch cache files being written\n"
        "SCAN 128 Watch font files being scanned to build caches\n"
        "- a list item that stops short of the line width\n"
        "- another list item after it"
    )
    pieces = read_pieces(table)
    assert continues(pieces[0], pieces[1])  # the prose line the width cut
    rows = pieces[-5:]
    assert [r.text[:5] for r in rows] == ["MATCH", "CACHE", "SCAN ", "a lis", "anoth"]
    assert not any(continues(a, b) for a, b in zip(rows, rows[1:], strict=False))
