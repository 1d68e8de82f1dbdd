"""What a node reads of its run's knobs: the graph's runtime context (``RAGContext`` in
``graph/context.py``, checked as the run starts), injected by LangGraph as ``runtime``.

Nodes sit below ``graph/`` and never import it, so they read a knob by name; a node called on
its own (no runtime, or no context) sees every knob unset: the pipeline as configured.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime


def knob(runtime: Runtime[Any] | None, name: str) -> Any:
    """The run's setting ``name``; None (as configured) when the run sets none."""
    return getattr(runtime.context, name, None) if runtime is not None else None
