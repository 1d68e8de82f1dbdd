"""The retriever entries of the pipeline configuration: the fields every entry shares
(``RetrieverEntry``, a ``rag`` plugin entry's plus a branch name) and one entry model per
registered backend, derived from the registry (``backends/registry.py``) and discriminated on
``backend``: ``ENTRY_MODELS``, ``AnyRetrieverEntry`` for a top-level entry and ``LegEntry`` for
a hybrid's leg. A refused backend name gets an entry model that refuses it, naming the entry.
The pipeline that holds the entries is ``graph/configuration.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from parallel_rag.backends.base import BackendSpec, RetrievalKind
from parallel_rag.backends.registry import BACKENDS, REFUSED
from parallel_rag.nodes.failure_policy import FailurePolicy
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class RetrieverEntry(_Strict):
    """Fields every retriever entry shares (a ``rag`` plugin entry's, plus a branch name). Each
    backend's entry model adds ``backend`` and ``backend_config`` and carries its registry
    entry as ``spec``, which decides the retrieval kind and whether ``similarity_threshold``
    applies."""

    spec: ClassVar[BackendSpec | None] = None

    name: str = Field(default="", pattern=r"^$|^[A-Za-z0-9_.-]{1,40}$")
    enabled: bool = True
    top_k: int | None = Field(default=None, gt=0, le=1000)
    similarity_threshold: float | None = Field(default=None, ge=0, le=1)
    on_failure: FailurePolicy | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    injection_mode: Literal["tool_role", "system_prompt"] | None = Field(
        default=None,
        description="accepted so rag plugin entries paste in unchanged; set it on the generator",
    )

    @field_validator("similarity_threshold")
    @classmethod
    def _threshold_applies_to_backend(cls, value: float | None) -> float | None:
        refusal = cls.spec.threshold_refusal if cls.spec is not None else None
        if value is not None and isinstance(refusal, str):
            raise ValueError(f"does not apply to {cls.spec.name}: {refusal}")
        return value

    @model_validator(mode="after")
    def _default_name(self) -> RetrieverEntry:
        if not self.name:
            self.name = self.backend  # type: ignore[attr-defined]
        return self

    @model_validator(mode="after")
    def _threshold_applies_to_settings(self) -> RetrieverEntry:
        refusal = self.spec.threshold_refusal if self.spec is not None else None
        if self.similarity_threshold is not None and callable(refusal):
            reason = refusal(self.backend_config)  # type: ignore[attr-defined]
            if reason:
                raise ValueError(f"similarity_threshold: {reason}")
        return self

    @property
    def retrieval_kind(self) -> RetrievalKind:
        """Which query views the branch takes: dense ones also get HyDE passages."""
        assert self.spec is not None
        return self.spec.kind_of(self.backend_config)  # type: ignore[attr-defined]

    @property
    def is_dense(self) -> bool:
        return self.retrieval_kind == "dense"


def _model_name(backend: str, suffix: str) -> str:
    return "".join(part.capitalize() for part in backend.split("_")) + suffix


def _discriminated(models: list[type[RetrieverEntry]]) -> Any:
    return Annotated[Union[tuple(models)], Field(discriminator="backend")]  # noqa: UP007


def _refused_entry(backend: str, reason: str) -> type[RetrieverEntry]:
    """An entry model that accepts the backend's name only to refuse it, naming the entry."""

    def refuse(cls: type, data: Any) -> Any:
        raise ValueError(reason)

    return create_model(
        _model_name(backend, "Entry"),
        __base__=RetrieverEntry,
        __module__=__name__,
        __validators__={"_refuse": model_validator(mode="before")(classmethod(refuse))},
        backend=(Literal[backend], ...),
        backend_config=(dict[str, Any], Field(default_factory=dict)),
    )


def _with_legs(spec: BackendSpec, leg_entry: Any) -> type[BaseModel]:
    """The backend's settings plus one field per leg, each a full entry of another backend
    (a backend with legs may not be one); legs that share a name get the leg's as suffix."""

    def no_nesting(cls: type, value: Any) -> Any:
        nested = value.get("backend") if isinstance(value, dict) else None
        if nested in BACKENDS and BACKENDS[nested].legs:
            raise ValueError(f"a {spec.name} may not nest a {nested}")
        return value

    def distinct_names(self: BaseModel) -> BaseModel:
        legs = [(leg, getattr(self, leg)) for leg in spec.legs if getattr(self, leg) is not None]
        names = [entry.name for _, entry in legs]
        for leg, entry in legs:
            if names.count(entry.name) > 1:
                entry.name = f"{entry.name}-{leg}"
        return self

    fields: dict[str, Any] = {
        leg: (leg_entry, ...) if required else (leg_entry | None, None)
        for leg, required in spec.legs.items()
    }
    return create_model(
        _model_name(spec.name, "Settings"),
        __base__=spec.settings,
        __module__=__name__,
        __validators__={
            "_no_nesting": field_validator(*spec.legs, mode="before")(classmethod(no_nesting)),
            "_distinct_names": model_validator(mode="after")(distinct_names),
        },
        **fields,
    )


def _entry_model(spec: BackendSpec, leg_entry: Any = None) -> type[RetrieverEntry]:
    """The retriever entry of one backend; ``backend_config`` may be omitted when every field
    of its settings has a default."""
    settings = _with_legs(spec, leg_entry) if spec.legs else spec.settings
    required = any(field.is_required() for field in settings.model_fields.values())
    model = create_model(
        _model_name(spec.name, "Entry"),
        __base__=RetrieverEntry,
        __module__=__name__,
        backend=(Literal[spec.name], ...),
        backend_config=(settings, ...) if required else (settings, Field(default_factory=settings)),
    )
    model.spec = spec
    return model


REFUSED_ENTRIES = {name: _refused_entry(name, reason) for name, reason in REFUSED.items()}
_LEG_ENTRIES = {name: _entry_model(spec) for name, spec in BACKENDS.items() if not spec.legs}
NESTED_BACKENDS = frozenset(_LEG_ENTRIES) | frozenset(REFUSED)
"""The ``backend`` values a leg (a hybrid's primary or fallback) may name: every backend
without legs of its own, refused ones included (so they are refused there too)."""
LegEntry = _discriminated([*_LEG_ENTRIES.values(), *REFUSED_ENTRIES.values()])

ENTRY_MODELS: dict[str, type[RetrieverEntry]] = {
    name: _LEG_ENTRIES.get(name) or _entry_model(spec, LegEntry) for name, spec in BACKENDS.items()
}
"""The entry model of every registered backend, by ``backend`` value."""
AnyRetrieverEntry = _discriminated([*ENTRY_MODELS.values(), *REFUSED_ENTRIES.values()])
