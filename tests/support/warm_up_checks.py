"""What the warm-up tests share: making an opener fail from a point on, so that a search which
still opens its store shows it."""

from __future__ import annotations

from typing import Any


def forbid(monkeypatch, owner: Any, attribute: str, what: str, wrap=staticmethod) -> None:
    """Replace ``owner.attribute`` with a callable that fails saying ``what`` happened during
    a search (``wrap`` it as a class attribute needs: staticmethod, classmethod, or None for a
    module function)."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{what} during a search")

    monkeypatch.setattr(owner, attribute, wrap(refused) if wrap else refused)
