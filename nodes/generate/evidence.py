"""The evidence format: fused documents as numbered ``<evidence>`` blocks a chat model cites
``[n]``. The chat generator, the router's injected context and the listwise reranker all write
evidence this way, so retrieved text stays inert data wherever it is shown to a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from parallel_rag.nodes import prompts
from parallel_rag.nodes.generate.citations import source_label


def neutralize(text: str) -> str:
    """Untrusted text made inert inside an evidence block: ``<`` and ``>`` become ``&lt;`` and
    ``&gt;``, so it can neither close its ``</evidence>`` tag nor spell a chat template's
    special tokens (``<|im_end|>``, ``<|im_start|>system``...) that a server would parse."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _evidence_block(number: int, source: str, content: str) -> str:
    return f"[{number}] (source: {source})\n<evidence>\n{content}\n</evidence>"


CUT_MARK = "\n..."
"""Ends evidence that ``max_context_length`` cut, after the last (closed) block."""


def format_evidence(documents: Sequence[Mapping[str, Any]], max_chars: int) -> str:
    """Numbered evidence blocks, each body between ``<evidence>`` tags it cannot close.

    Retrieved text is untrusted: the body and the source are ``neutralize``d and
    the source kept on one line, so instructions in a document ("ignore previous
    instructions", a fake ``[2] (source: ...)`` header, a closing tag) stay data inside their
    own block. Longer than ``max_chars``: the blocks that fit are kept, the next one is cut
    (and still closed), the rest left out, and the text ends with ``...``.
    """
    blocks = []
    for number, doc in enumerate(documents, start=1):
        source = neutralize(" ".join(source_label(doc).split()))
        blocks.append((number, source, neutralize(doc["content"].strip())))
    full = prompts.EVIDENCE_HEADER + "".join("\n\n" + _evidence_block(*block) for block in blocks)
    if len(full) <= max_chars:
        return full
    room = max_chars - len(CUT_MARK)
    text = prompts.EVIDENCE_HEADER
    if len(text) > room:
        return (text[: max(0, max_chars - 3)] + "...")[:max_chars]
    for number, source, content in blocks:
        block = "\n\n" + _evidence_block(number, source, content)
        if len(text) + len(block) <= room:
            text += block
            continue
        spare = room - len(text) - len("\n\n" + _evidence_block(number, source, ""))
        if spare > 0:
            text += "\n\n" + _evidence_block(number, source, content[:spare].rstrip())
        break
    return text + CUT_MARK


EVIDENCE_CALL_ID = "call_evidence_0"
