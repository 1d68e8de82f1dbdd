"""The ``backend_config`` of a ``hybrid`` retriever: its own setting (the strategy); the
configuration adds its legs, ``primary`` and ``fallback``, from ``BACKEND.legs``. Pydantic and
the standard library only, like every backend's settings module."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

HybridStrategy = Literal["sequential", "parallel"]


class HybridOptions(BaseModel):
    """The hybrid's own setting; the configuration adds its legs, ``primary`` and
    ``fallback`` (each a full retriever entry of another backend), from ``BACKEND.legs``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    strategy: HybridStrategy = "sequential"
