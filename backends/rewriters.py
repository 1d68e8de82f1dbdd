"""Query rewriters: a LangChain chat model turned into one or more retrieval query views.

Kinds: ``multi_query`` (alternative phrasings), ``decompose`` (sub-questions) and ``hyde`` (one
hypothetical passage, used only as a dense-retrieval query, never as evidence). Parsing is
forgiving of what small models write: numbering, bullets, quotes, blank lines, echoes.
"""

from __future__ import annotations

import re
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from parallel_rag.backends import prompts

RewriterKind = Literal["multi_query", "decompose", "hyde"]
MAX_VIEW_CHARS = 500
MAX_HYDE_CHARS = 2000

# A numbered/lettered or "Query 1:" marker must be followed by whitespace, so that queries
# starting with "U.S.", "3.5 inch", "2:00 pm" or "Q-learning" keep their first characters.
_LIST_MARKER = re.compile(
    r"^\s*(?:(?:\d+|[a-zA-Z])[.):](?=\s|$)|[-*\u2022>]+"
    r"|(?:query|question|q)\s*\d*\s*[:.)-](?=\s|$))\s*",
    re.I,
)


class EmptyRewriteError(ValueError):
    """The rewriter produced no usable query; handled by the rewriter's ``on_failure``."""


def parse_query_lines(text: str, *, original: str, limit: int) -> list[str]:
    """Query strings from a model's list-ish output: markers stripped, echoes and dups dropped."""
    queries: list[str] = []
    seen = {original.strip().casefold()}
    for line in text.splitlines():
        candidate = _LIST_MARKER.sub("", line).strip().strip("\"'`").strip()
        if not candidate or candidate.endswith(":") and len(candidate) < 60:
            continue
        candidate = candidate[:MAX_VIEW_CHARS].strip()
        key = candidate.casefold()
        if key in seen:
            continue
        seen.add(key)
        queries.append(candidate)
        if len(queries) >= limit:
            break
    return queries


class ChatModelRewriter:
    """Rewrites a question with any LangChain chat model; returns (text, kind) views."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        kind: RewriterKind = "multi_query",
        num_queries: int = 3,
        temperature: float | None = None,
        max_tokens: int | None = None,
        prompt: str | None = None,
    ):
        self.model = model
        self.kind = kind
        self.num_queries = num_queries
        self.prompt = (
            prompt
            or {
                "multi_query": prompts.MULTI_QUERY_PROMPT,
                "decompose": prompts.DECOMPOSE_PROMPT,
                "hyde": prompts.HYDE_PROMPT,
            }[kind]
        )
        bind = {"temperature": temperature, "max_tokens": max_tokens}
        bind = {k: v for k, v in bind.items() if v is not None}
        self.runnable = model.bind(**bind) if bind else model

    def _messages(self, query: str) -> list[HumanMessage]:
        return [HumanMessage(self.prompt.format(query=query, num_queries=self.num_queries))]

    def _parse(self, query: str, content: object) -> list[tuple[str, str]]:
        text = content if isinstance(content, str) else str(content)
        if self.kind == "hyde":
            passage = text.strip()[:MAX_HYDE_CHARS].strip()
            if not passage:
                raise EmptyRewriteError("the HyDE rewriter returned an empty passage")
            return [(passage, "hyde")]
        queries = parse_query_lines(text, original=query, limit=self.num_queries)
        if not queries:
            raise EmptyRewriteError(f"the {self.kind} rewriter returned no usable query")
        return [(q, "rewrite") for q in queries]

    def rewrite(self, query: str, config=None) -> list[tuple[str, str]]:
        return self._parse(query, self.runnable.invoke(self._messages(query), config).content)

    async def arewrite(self, query: str, config=None) -> list[tuple[str, str]]:
        message = await self.runnable.ainvoke(self._messages(query), config)
        return self._parse(query, message.content)
