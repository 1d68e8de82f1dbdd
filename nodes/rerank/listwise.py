"""``reranker.kind: llm``: listwise reranking with a chat model (RankGPT's sliding window).

The model sees numbered passages and the query and answers with passage numbers, most
relevant first (``[2] > [1] > [3]``). Candidates are ranked in windows of ``window_size``
passages, moving from the end of the list to the start by ``window_step``, so the best
passages bubble to the top in ``ceil((n - size) / step) + 1`` model calls per branch.

The scores handed to the ``rerank`` node are the final positions turned into descending
numbers (``n - position``), so the node's sort reproduces the model's order. Passages a reply
leaves out follow the ones it named, in their previous order (as in RankGPT).

Budget: the model reads each passage's first ``passage_chars`` characters. A longer passage is
refused (``overflow: reject``, the default, never truncating) unless ``overflow: truncate`` is
configured; the query is never cut. Passages are delimited like evidence and neutralised, so
retrieved text cannot steer the ranking prompt's structure. A reply that names no passage is
a ``ScorerError`` (``on_failure`` applies).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from parallel_rag.nodes import prompts
from parallel_rag.nodes.generate.evidence import neutralize
from parallel_rag.nodes.rerank.scorers import Overflow, ScorerError, TokenBudgetError

_NUMBER = re.compile(r"\d{1,3}")


def parse_ranking(reply: str, count: int) -> list[int]:
    """0-based passage indexes in the order the reply names them (``[2] > [1]`` or
    ``2, 1``); numbers outside ``1..count`` and repeats are ignored."""
    order: list[int] = []
    for match in _NUMBER.finditer(reply):
        number = int(match.group())
        if 1 <= number <= count and number - 1 not in order:
            order.append(number - 1)
    return order


def validate_ranking_prompt(template: str) -> str:
    """A ranking prompt must name ``{query}`` and ``{passages}`` and format with ``query``,
    ``count`` and ``passages`` only."""
    missing = [name for name in ("{query}", "{passages}") if name not in template]
    if missing:
        raise ValueError(f"must contain the {' and '.join(missing)} placeholder(s)")
    try:
        template.format(query="q", count=2, passages="[1] a")
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            "only {query}, {count} and {passages} may be used; write other braces as {{ }} "
            f"({type(error).__name__}: {error})"
        ) from None
    return template


def window_starts(count: int, size: int, step: int) -> list[int]:
    """Where each window starts, back to front (RankGPT): the last window ends at ``count``,
    the first starts at 0."""
    if count <= size:
        return [0]
    starts = list(range(count - size, 0, -step))
    return [*starts, 0] if starts[-1] != 0 else starts


class ListwiseLLMScorer:
    """Ranks a branch's candidates with a chat model; returns one score per candidate."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        window_size: int = 20,
        window_step: int = 10,
        passage_chars: int = 500,
        overflow: Overflow = "reject",
        prompt: str = prompts.LISTWISE_RERANK_PROMPT,
    ):
        self.model = model
        self.window_size = window_size
        self.window_step = window_step
        self.passage_chars = passage_chars
        self.overflow = overflow
        self.prompt = prompt
        self.calls = 0
        self._lock = threading.Lock()

    @property
    def identity(self) -> str:
        name = getattr(self.model, "model_name", None) or type(self.model).__name__
        return f"llm:{name}:window={self.window_size}/{self.window_step}:{self.passage_chars}"

    def prepare(self) -> ListwiseLLMScorer:
        """Nothing to load: the chat model is reached per request."""
        return self

    def messages(self, query: str, passages: Sequence[str]) -> list:
        """The ranking conversation for one window (passages already within budget)."""
        listed = "\n\n".join(
            f"[{n}]\n<passage>\n{neutralize(text)}\n</passage>"
            for n, text in enumerate(passages, start=1)
        )
        return [
            SystemMessage(prompts.LISTWISE_RERANK_SYSTEM_PROMPT),
            HumanMessage(self.prompt.format(query=query, count=len(passages), passages=listed)),
        ]

    def _rank_window(self, query: str, passages: Sequence[str]) -> list[int]:
        reply = self.model.invoke(self.messages(query, passages))
        with self._lock:
            self.calls += 1
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        order = parse_ranking(text, len(passages))
        if not order:
            raise ScorerError(f"llm reranker reply names no passage: {text[:120]!r}")
        return order + [i for i in range(len(passages)) if i not in order]

    def _within_budget(self, documents: list[str]) -> list[str]:
        over = [(i, len(d)) for i, d in enumerate(documents) if len(d) > self.passage_chars]
        if over and self.overflow == "reject":
            raise TokenBudgetError(
                "characters per passage", over, self.passage_chars, len(documents)
            )
        return [d[: self.passage_chars] for d in documents]

    def score(self, query: str, documents: list[str]) -> list[float]:
        if not documents:
            return []
        passages = self._within_budget(list(documents))
        order = list(range(len(passages)))  # positions -> document index
        for start in window_starts(len(order), self.window_size, self.window_step):
            window = order[start : start + self.window_size]
            ranked = self._rank_window(query, [passages[i] for i in window])
            order[start : start + len(window)] = [window[i] for i in ranked]
        scores = [0.0] * len(order)
        for position, index in enumerate(order):
            scores[index] = float(len(order) - position)
        return scores
