"""PodDisruptionBudget JSON (policy/v1) → the typed `state.defrag.DisruptionBudget`: its selector
and how many disruptions it allows now (`status.disruptionsAllowed`, 0 when the disruption
controller has not written it yet, as the Eviction API then treats it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.state.defrag import DisruptionBudget
from gpupool.state.pods import Expression


def read_budget(pdb: Mapping[str, Any]) -> DisruptionBudget:
    meta = pdb.get("metadata") or {}
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    selector = spec.get("selector")
    labels: tuple[tuple[str, str], ...] | None = None
    expressions: tuple[Expression, ...] = ()
    if isinstance(selector, Mapping):
        labels = tuple(
            sorted((str(k), str(v)) for k, v in (selector.get("matchLabels") or {}).items())
        )
        expressions = tuple(
            (
                str(e.get("key") or ""),
                str(e.get("operator") or ""),
                tuple(str(v) for v in e.get("values") or ()),
            )
            for e in selector.get("matchExpressions") or ()
            if isinstance(e, Mapping)
        )
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        allowed=allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
        match_labels=labels,
        expressions=expressions,
    )
