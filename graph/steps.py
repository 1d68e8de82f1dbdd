"""``GraphStep``: how a node of ours joins a ``StateGraph`` with one implementation per mode and
nothing but public API (a LangChain ``Runnable`` handed to ``add_node``).

LangGraph runs a plain function node in a worker thread under ``ainvoke``/``astream`` and takes
one function only, so a node with a coroutine of its own (the retrieve node awaits its lookup on
the event loop, the loop keeping its timeout), or one whose work is too short to be worth a
thread hop (fuse), is given to ``add_node`` as a ``Runnable`` instead: LangGraph calls its
``invoke`` or ``ainvoke`` with the task's config and runs it in the config context of the task,
so ``langgraph.runtime.get_runtime()`` returns the task's runtime. A ``Runnable`` node makes no
run of its own in traces, as LangGraph's own function nodes do not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langgraph.runtime import Runtime, get_runtime

NodeFunction = Callable[[Any, RunnableConfig, Runtime[Any]], Any]
"""A node's work: ``(input, config, runtime)`` -> its update (a dict or a ``Command``)."""


class GraphStep(Runnable[Any, Any]):
    """A node as LangGraph runs a ``Runnable``: ``func`` under ``invoke``; under ``ainvoke``,
    ``afunc`` when the node has one, else ``func`` in a worker thread (``offload``, what LangGraph
    does with a sync function node) or on the event loop itself (short CPU work)."""

    def __init__(
        self,
        func: NodeFunction,
        afunc: Callable[[Any, RunnableConfig, Runtime[Any]], Awaitable[Any]] | None = None,
        *,
        name: str,
        offload: bool = False,
    ):
        self.func = func
        self.afunc = afunc
        self.name = name
        self.offload = offload

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:  # noqa: A002
        return self.func(input, config or {}, get_runtime())

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:  # noqa: A002
        runtime = get_runtime()
        config = config or {}
        if self.afunc is not None:
            return await self.afunc(input, config, runtime)
        if self.offload:
            return await run_in_executor(config, self.func, input, config, runtime)
        return self.func(input, config, runtime)
