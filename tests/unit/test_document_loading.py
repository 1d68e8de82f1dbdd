"""Reading user files into chunks (studio/ingestion/: load, convert, chunk): formats, ids,
errors."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from parallel_rag.studio.documents import DocumentLoadError
from parallel_rag.studio.ingestion.chunk import load_chunks
from parallel_rag.studio.ingestion.load import discover_files, file_id_for

MARKDOWN = """# Solar System

The Sun is a star at the centre of the solar system.

## Planets

Mercury is the closest planet to the Sun. Venus is the hottest planet.
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, *records) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    return write(path, "\n".join(lines) + "\n")


# ---------------------------------------------------------------- formats


def test_markdown_chunks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "docs" / "solar.md", MARKDOWN)
    chunks = load_chunks(path)
    assert len(chunks) == 1
    (chunk,) = chunks
    assert chunk.content == MARKDOWN.strip()
    assert chunk.metadata == {
        "source": str(Path("docs") / "solar.md"),
        "file_id": file_id_for(path),
        "title": "Solar System",
        "chunk_index": 0,
        "section": "Solar System",  # the heading path where the chunk starts
    }
    assert uuid.UUID(chunk.id)  # a UUID every store accepts


def test_long_markdown_is_split_into_ordered_chunks(tmp_path):
    body = "\n\n".join(
        f"## Section {i}\n\n" + f"Sentence {i} about planets. " * 8 for i in range(6)
    )
    path = write(tmp_path / "long.md", "# Long\n\n" + body)
    chunks = load_chunks(path, chunk_size=200, chunk_overlap=0)
    assert len(chunks) > 3
    assert [c.metadata["chunk_index"] for c in chunks] == list(range(len(chunks)))
    assert all(len(c.content) <= 200 for c in chunks)
    assert all(c.metadata["title"] == "Long" for c in chunks)
    assert len({c.id for c in chunks}) == len(chunks)
    joined = " ".join(c.content for c in chunks)
    assert "Section 5" in joined and "Sentence 0 about planets." in joined


def test_text_file_title_is_the_file_stem(tmp_path):
    path = write(tmp_path / "notes.txt", "Plain text notes.\nSecond line.\n")
    (chunk,) = load_chunks(path)
    assert chunk.metadata["title"] == "notes"
    assert chunk.content == "Plain text notes.\nSecond line."


def test_jsonl_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = jsonl(
        tmp_path / "kb.jsonl",
        {
            "id": "r1",
            "title": "Mars",
            "text": "Mars is red.",
            "metadata": {"lang": "en", "year": 2020, "ok": True, "nested": {"x": 1}, "tags": [1]},
        },
        "",
        {"content": "Jupiter is big."},
        {"_id": "r3", "text": "Saturn has rings.", "title": ""},
    )
    first, second, third = load_chunks(path, extra_metadata={"collection": "space"})
    assert first.content == "Mars\nMars is red."
    assert first.metadata == {
        "lang": "en",
        "year": 2020,
        "ok": True,
        "collection": "space",
        "source": "kb.jsonl#r1",
        "file_id": file_id_for(path),
        "title": "Mars",
        "chunk_index": 0,
        "record_id": "r1",
    }
    assert second.content == "Jupiter is big."
    assert second.metadata["record_id"] == "3"  # no id: its line number
    assert second.metadata["source"] == "kb.jsonl#3"
    assert third.content == "Saturn has rings."
    assert third.metadata["record_id"] == "r3"
    assert len({first.id, second.id, third.id}) == 3


# ---------------------------------------------------------------- stable ids


def test_chunk_ids_are_stable_across_calls_and_working_directories(tmp_path, monkeypatch):
    path = write(tmp_path / "a" / "solar.md", MARKDOWN)
    records = jsonl(tmp_path / "a" / "kb.jsonl", {"id": "r1", "text": "Mars is red."})
    monkeypatch.chdir(tmp_path)
    first = [c.id for c in load_chunks(path)] + [c.id for c in load_chunks(records)]
    again = [c.id for c in load_chunks(Path("a/solar.md"))] + [
        c.id for c in load_chunks(Path("a/kb.jsonl"))
    ]
    monkeypatch.chdir(tmp_path / "a")
    elsewhere = [c.id for c in load_chunks(Path("solar.md"))] + [
        c.id for c in load_chunks(Path("kb.jsonl"))
    ]
    assert first == again == elsewhere


def test_chunk_ids_differ_between_files_with_the_same_text(tmp_path):
    one = load_chunks(write(tmp_path / "one.md", MARKDOWN))
    two = load_chunks(write(tmp_path / "two.md", MARKDOWN))
    assert {c.id for c in one}.isdisjoint({c.id for c in two})


def test_edited_file_keeps_its_chunk_ids(tmp_path):
    path = write(tmp_path / "doc.txt", "first version")
    before = [c.id for c in load_chunks(path)]
    write(path, "second version")
    assert [c.id for c in load_chunks(path)] == before  # re-ingest replaces, not duplicates


# ---------------------------------------------------------------- errors


def test_invalid_utf8_names_the_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    with pytest.raises(DocumentLoadError) as caught:
        load_chunks(path)
    assert str(path) in str(caught.value)
    assert "UTF-8" in str(caught.value)


@pytest.mark.parametrize(
    ("bad_line", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"title": "no body"}', "text"),
        ('{"text": "   "}', "text"),
        ('{"text": 42}', "text"),
        ('{"text": "ok", "metadata": [1]}', "metadata"),
    ],
)
def test_bad_jsonl_line_is_named_with_its_line_number(tmp_path, bad_line, fragment):
    path = jsonl(tmp_path / "kb.jsonl", {"text": "fine"}, "", bad_line, {"text": "also fine"})
    with pytest.raises(DocumentLoadError) as caught:
        load_chunks(path)
    message = str(caught.value)
    assert f"{path}:3" in message
    assert fragment in message


def test_unsupported_suffix_refused(tmp_path):
    path = write(tmp_path / "report.odt", "x")
    with pytest.raises(DocumentLoadError, match="unsupported") as caught:
        discover_files([path])
    assert "report.odt" in str(caught.value) and ".odt" in str(caught.value)


def test_missing_path_refused(tmp_path):
    with pytest.raises(DocumentLoadError, match="no such file"):
        discover_files([tmp_path / "nowhere"])


# ---------------------------------------------------------------- discovery


def test_directory_discovery(tmp_path):
    root = tmp_path / "corpus"
    expected = [
        write(root / "a.md", "# A"),
        write(root / "b.markdown", "# B"),
        write(root / "c.txt", "C"),
        write(root / "sub" / "d.jsonl", '{"text": "D"}'),
        write(root / "sub" / "deeper" / "e.txt", "E"),
    ]
    write(root / "ignored.odt", "x")
    write(root / "ignored.py", "x = 1")
    write(root / "sub" / "ignored.json", "{}")
    found = discover_files([root])
    assert found == sorted(expected)


def test_discovery_deduplicates_and_keeps_given_order(tmp_path):
    a = write(tmp_path / "dir" / "a.md", "# A")
    z = write(tmp_path / "z.txt", "Z")
    assert discover_files([z, tmp_path / "dir", a, z]) == [z, a]


def test_empty_directory_finds_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    assert discover_files([tmp_path / "empty"]) == []
