"""``GraphStep``: how a node of ours joins a ``StateGraph`` with one implementation per mode and
nothing but public API (a LangChain ``Runnable`` handed to ``add_node``), and where each of its
calls gets what the run set for it.

LangGraph runs a plain function node in a worker thread under ``ainvoke``/``astream`` and takes
one function only, so a node with a coroutine of its own (the retrieve node awaits its lookup on
the event loop, the loop keeping its timeout), or one whose work is too short to be worth a
thread hop (fuse), is given to ``add_node`` as a ``Runnable`` instead: LangGraph calls its
``invoke`` or ``ainvoke`` with the task's config and runs it in the config context of the task,
so ``langgraph.runtime.get_runtime()`` returns the task's runtime. A ``Runnable`` node makes no
run of its own in traces, as LangGraph's own function nodes do not.

Each call then gets the run's knobs as ``runtime.context`` (the Runtime context over the
``configurable`` knobs, ``knobs_from``: LangGraph hands a node the context as the caller gave
it), and searches the stores' revisions the run took as it started (``within_run``, keyed by
the run's ``RunControl``, which LangGraph gives each run and shares with its tasks); the node
that ends the run's searches (fuse) lets them go (``close_run``), and so does a node that
fails (the run fails with it).

The first task of a run writes the run's request into the state along with its own update (the
``REQUEST`` its ``Send`` payload carries, ``graph/request.py``), and the last node of a run on a
thread clears the request fields, so the thread's next run sees only what it was given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command
from parallel_rag.backends.shared.revisions import close_run, within_run
from parallel_rag.graph.context import UNSET, knobs_from
from parallel_rag.graph.request import CLEARED, REQUEST, threaded

NodeFunction = Callable[[Any, RunnableConfig, Runtime[Any]], Any]
"""A node's work: ``(input, config, runtime)`` -> its update (a dict or a ``Command``)."""


def run_runtime(runtime: Runtime[Any], config: RunnableConfig | None) -> Runtime[Any]:
    """``runtime`` with the run's knobs as its context: the context LangGraph was given, over
    the knobs in ``configurable`` (``with_config(configurable=...)``, LangServe). The entry
    router checked them before any node ran."""
    context = runtime.context
    knobs = knobs_from(context, (config or {}).get("configurable"))
    if knobs is context or (context is None and knobs is UNSET):
        return runtime  # nothing to merge (a node reads an absent context as no knob set)
    return runtime.override(context=knobs)


class GraphStep(Runnable[Any, Any]):
    """A node as LangGraph runs a ``Runnable``: ``func`` under ``invoke``; under ``ainvoke``,
    ``afunc`` when the node has one, else ``func`` in a worker thread (``offload``, what LangGraph
    does with a sync function node) or on the event loop itself (short CPU work). ``ends_run``:
    no store is searched after this node, so the run's held revisions go; they go as well when
    the node raises (or is cancelled), since the run ends with it. ``ends_request``: the last
    node of the graph (on a thread, it clears the request fields)."""

    def __init__(
        self,
        func: NodeFunction,
        afunc: Callable[[Any, RunnableConfig, Runtime[Any]], Awaitable[Any]] | None = None,
        *,
        name: str,
        offload: bool = False,
        ends_run: bool = False,
        ends_request: bool = False,
    ):
        self.func = func
        self.afunc = afunc
        self.name = name
        self.offload = offload
        self.ends_run = ends_run
        self.ends_request = ends_request

    def _with_request(self, input: Any, config: RunnableConfig, update: Any) -> Any:  # noqa: A002
        """``update`` with the request the run's first task carries (the node's own fields win),
        and, from the last node of a run on a thread, the request fields cleared."""
        written = input.get(REQUEST) if isinstance(input, dict) else None
        if self.ends_request and threaded(config):
            written = {**CLEARED, **(written or {})}
        if not written:
            return update
        if isinstance(update, Command):
            own = update.update if isinstance(update.update, dict) else {}
            return replace(update, update={**written, **own})
        return {**written, **(update or {})}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:  # noqa: A002
        config = config or {}
        runtime = run_runtime(get_runtime(), config)
        try:
            with within_run(runtime.control):
                update = self.func(input, config, runtime)
        except BaseException:
            close_run(runtime.control)  # the run fails with it: nothing searches any more
            raise
        if self.ends_run:
            close_run(runtime.control)
        return self._with_request(input, config, update)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:  # noqa: A002
        config = config or {}
        runtime = run_runtime(get_runtime(), config)
        try:
            with within_run(runtime.control):
                if self.afunc is not None:
                    update = await self.afunc(input, config, runtime)
                elif self.offload:  # the worker thread runs in a copy of this context
                    update = await run_in_executor(config, self.func, input, config, runtime)
                else:
                    update = self.func(input, config, runtime)
        except BaseException:  # cancelled too
            close_run(runtime.control)
            raise
        if self.ends_run:
            close_run(runtime.control)
        return self._with_request(input, config, update)
