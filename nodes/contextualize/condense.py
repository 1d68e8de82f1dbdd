"""A standalone question written by a chat model from the recent turns (when one is configured).

Condense-question chains are known to rewrite questions that needed nothing, so the model is
only asked when the LLM-free check (``carry_over.resolve``) finds that the question refers
back, never on a first turn, and with a bounded history (``history.recent_turns``). A reply that
is empty, far longer than a question, or an answer instead of a question falls back to the
LLM-free resolution; the question as written stays a query view either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from parallel_rag.nodes import prompts
from parallel_rag.nodes.contextualize.history import Turn

MAX_STANDALONE_CHARS = 400


def format_history(turns: Sequence[Turn]) -> str:
    return "\n".join(f"{'User' if t.role == 'user' else 'Assistant'}: {t.text}" for t in turns)


def condense(
    model: BaseChatModel,
    question: str,
    turns: Sequence[Turn],
    config: RunnableConfig | None = None,
) -> str | None:
    """The model's standalone version of ``question``; None when its reply is unusable."""
    messages = [
        SystemMessage(prompts.CONDENSE_SYSTEM_PROMPT),
        HumanMessage(
            prompts.CONDENSE_PROMPT.format(history=format_history(turns), question=question)
        ),
    ]
    reply = model.invoke(messages, config).text.strip()
    line = next((part.strip(" \"'") for part in reply.splitlines() if part.strip()), "")
    for prefix in ("standalone question:", "question:", "rewritten:"):
        if line.lower().startswith(prefix):
            line = line[len(prefix) :].strip(" \"'")
    if not line or len(line) > max(MAX_STANDALONE_CHARS, 3 * len(question)):
        return None
    return line
