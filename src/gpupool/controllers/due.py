"""A loop's next deadline from its parts: the soonest of the times given (None: none)."""

from __future__ import annotations


def soonest(*times: float | None) -> float | None:
    """The earliest of `times` that is not None (None when all are)."""
    return min((t for t in times if t is not None), default=None)
