"""Citations in an answer: the ``[n]`` marks that point at numbered evidence blocks.

Every generator returns a ``GeneratedAnswer``; a chat model's reply is checked here
(``check_citations``) so a citation of evidence that does not exist is dropped and warned about,
never passed on as real.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parallel_rag.nodes import prompts
from parallel_rag.nodes.records import Citation

LOCATION_FIELDS = ("page", "page_end", "slide", "section")

# "[2]" or a group "[1, 3]"; the leading space goes with it when a citation is dropped
_CITATION = re.compile(r"([ \t]*)\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]")
_CITATION_SEPARATOR = re.compile(r"\s*[,;]\s*")
_LINE_START_CITATION = re.compile(r"(?m)^([ \t]*)\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\][ \t]*")


@dataclass
class GeneratedAnswer:
    """An answer, the evidence numbers it cites, and anything worth warning about."""

    answer: str
    cited_numbers: list[int]
    warnings: list[str] = field(default_factory=list)
    message_id: str | None = field(default=None, compare=False)  # the streamed reply's id


def cited_numbers(answer: str, available: int) -> tuple[list[int], list[int]]:
    """Citation numbers in ``answer``: (valid ones in order of first use, invalid ones)."""
    valid: list[int] = []
    invalid: list[int] = []
    for match in _CITATION.finditer(answer):
        for number in _kept_numbers(match.group(2), available)[0]:
            target = valid if 1 <= number <= available else invalid
            if number not in target:
                target.append(number)
    return valid, invalid


def _kept_numbers(numbers_text: str, available: int) -> tuple[list[int], list[int]]:
    numbers = [int(part) for part in _CITATION_SEPARATOR.split(numbers_text)]
    return numbers, list(dict.fromkeys(n for n in numbers if 1 <= n <= available))


def drop_invalid_citations(answer: str, available: int) -> str:
    """``answer`` without citations of evidence numbers outside ``1..available``
    (``[2, 9]`` becomes ``[2]``; ``[9]`` disappears with the space before it)."""

    def drop_line_opener(match: re.Match) -> str:
        _, kept = _kept_numbers(match.group(2), available)
        return match.group(0) if kept else match.group(1)  # gone, with the spaces after it

    def keep_valid(match: re.Match) -> str:
        lead, numbers_text = match.groups()
        numbers, kept = _kept_numbers(numbers_text, available)
        if len(kept) == len(numbers):
            return match.group(0)
        if kept:
            return f"{lead}[{', '.join(map(str, kept))}]"
        # dropped whole: the space before it stays only when a word or citation follows directly
        following = match.string[match.end() : match.end() + 1]
        return lead if following and (following.isalnum() or following in "[(") else ""

    return _CITATION.sub(keep_valid, _LINE_START_CITATION.sub(drop_line_opener, answer))


def check_citations(text: str, available: int) -> GeneratedAnswer:
    """A chat model's reply as a result: citations parsed and checked against the evidence
    numbers; invalid ones are dropped and warned about, never passed on as real."""
    text = text.strip() or prompts.INSUFFICIENT_EVIDENCE
    valid, invalid = cited_numbers(text, available)
    warnings = []
    if invalid:
        text = drop_invalid_citations(text, available).strip()
        warnings.append(
            f"generator cited evidence that does not exist: {invalid} "
            f"(evidence is numbered 1..{available}); citations dropped"
        )
    if not valid and text != prompts.INSUFFICIENT_EVIDENCE:
        warnings.append("generator answer cites no evidence block")
    return GeneratedAnswer(text, valid, warnings)


def location(metadata: Mapping[str, Any]) -> str:
    """Where in its file a chunk sits, as people cite it: ``p. 6`` (``pp. 6-7``), ``slide 3``,
    else ``§ Setup > Linux``; '' for a chunk of a file without structure."""
    page, end = metadata.get("page"), metadata.get("page_end")
    if page:
        return f"pp. {page}-{end}" if end and end != page else f"p. {page}"
    if metadata.get("slide"):
        return f"slide {metadata['slide']}"
    return f"§ {metadata['section']}" if metadata.get("section") else ""


def source_label(document: Mapping[str, Any]) -> str:
    """A document's source with its location (``manual.pdf p. 6``): what every surface shows."""
    metadata = document.get("metadata") or {}
    where = location(metadata)
    source = str(metadata.get("source") or document["id"])
    return f"{source} {where}" if where else source


def citation(number: int, document: Mapping[str, Any]) -> Citation:
    """The citation of evidence block ``number``: its id, source and location fields."""
    metadata = document.get("metadata") or {}
    cited = Citation(number=number, id=document["id"], source=metadata.get("source"))
    for name in LOCATION_FIELDS:
        if metadata.get(name) not in (None, ""):
            cited[name] = metadata[name]  # type: ignore[literal-required]
    return cited
