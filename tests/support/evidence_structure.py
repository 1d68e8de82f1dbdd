"""Reads an evidence prompt the way it is meant to be read, for the prompt-injection tests."""

from __future__ import annotations

from parallel_rag.nodes.prompts import EVIDENCE_HEADER


def split_evidence(text: str) -> tuple[list[str], list[str]]:
    """(non-empty lines outside every ``<evidence>`` block but the header line, block bodies);
    fails when a block is left open."""
    outside, bodies, inside = [], [], None
    for line in text.splitlines():
        if inside is None and line == "<evidence>":
            inside = []
        elif inside is None:
            outside.append(line)
        elif line == "</evidence>":
            bodies.append("\n".join(inside))
            inside = None
        else:
            inside.append(line)
    assert inside is None, "an evidence block was left open"
    return [line for line in outside if line and line != EVIDENCE_HEADER], bodies
