"""The resolution record of a question with nothing before it (what ``fuse`` reports on a
first turn, where the ``contextualize`` node does not run)."""

from __future__ import annotations

from parallel_rag.nodes.records import ResolutionRecord


def first_turn_record(question: str) -> ResolutionRecord:
    """Retrieved on as written: there is no earlier turn to resolve it against."""
    return ResolutionRecord(
        question=question, retrieved_on=question, method="as_written", reason="first turn"
    )
