"""Conditions in a status's `conditions` list, written by several parties (pure).

A GpuNode's conditions come from two writers: the controller's node health (`Heartbeat`) and the
agent (`OtherGpuPath`). A merge patch replaces a list whole, so each writer sends the list with
its own condition set and every other kept as it found it; `lastTransitionTime` moves only when
the status does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def find_condition(held: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    """The condition of type `kind` in `held`, or None."""
    return next((c for c in held or () if c.get("type") == kind), None)


def with_condition(
    held: Sequence[Mapping[str, Any]] | None, condition: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """`held` with `condition` put in place of the one of its type (appended when none), the
    earlier `lastTransitionTime` kept when the status did not change."""
    new = dict(condition)
    old = find_condition(held, str(new["type"]))
    if old is not None and old.get("status") == new.get("status") and old.get("lastTransitionTime"):
        new["lastTransitionTime"] = old["lastTransitionTime"]
    out = [dict(c) for c in held or () if c.get("type") != new["type"]]
    out.append(new)
    return out
