"""GpuPool JSON → the typed `state.pool.PoolObject`, its defragmentation settings checked once
here: a value the CRD schema cannot rule out (an object stored before a rule, a notice longer
than the round's timeout) becomes `problem`, which the loop reports as a condition on the
GpuPool, and nothing of that pool is moved."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire.times import parse_time
from gpupool.state.pool import InvalidPoolSpec, PoolDefrag, PoolObject


def _number(spec: Mapping[str, Any], key: str, default: float, low: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
        raise InvalidPoolSpec(
            f"spec.defrag.{key} must be a number of seconds, {low:g} or more; got {value!r}"
        )
    return float(value)


def read_defrag(spec: Mapping[str, Any]) -> PoolDefrag | None:
    """The settings, None when off; InvalidPoolSpec says what to fix."""
    defrag = spec.get("defrag")
    if defrag is None:
        return None
    if not isinstance(defrag, Mapping):
        raise InvalidPoolSpec(f"spec.defrag must be an object; got {defrag!r}")
    if not defrag.get("enabled", False):
        return None
    threshold = spec.get("defragThresholdPercent", 30)
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 <= threshold <= 100:
        raise InvalidPoolSpec(
            f"spec.defragThresholdPercent is a percentage of a card's memory from 0 to 100; "
            f"got {threshold!r}"
        )
    interval = _number(defrag, "intervalSeconds", 300, 1)
    notice = _number(defrag, "noticeSeconds", 60, 0)
    timeout = _number(defrag, "timeoutSeconds", 900, 1)
    if timeout <= notice:
        raise InvalidPoolSpec(
            f"spec.defrag.timeoutSeconds ({timeout:g}) must be longer than noticeSeconds "
            f"({notice:g}): a round would end before its first eviction"
        )
    max_moves = defrag.get("maxMoves")
    if max_moves is not None and (
        isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 1
    ):
        raise InvalidPoolSpec(
            f"spec.defrag.maxMoves must be a whole number of 1 or more (leave it out for no "
            f"bound); got {max_moves!r}"
        )
    orphans = defrag.get("moveOrphans", False)
    if not isinstance(orphans, bool):
        raise InvalidPoolSpec(f"spec.defrag.moveOrphans must be true or false; got {orphans!r}")
    return PoolDefrag(threshold, interval, notice, timeout, max_moves, orphans)


def read_pool(obj: Mapping[str, Any]) -> PoolObject:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name") or "")
    generation = meta.get("generation")
    selector = spec.get("nodeSelector") or {}
    models = spec.get("models") or ()
    defrag: PoolDefrag | None = None
    problem: str | None = None
    try:
        defrag = read_defrag(spec)
    except InvalidPoolSpec as err:
        problem = str(err)
    last = (
        (status.get("defrag") or {}).get("lastRound")
        if isinstance(status.get("defrag"), Mapping)
        else None
    )
    return PoolObject(
        name=name,
        generation=generation if isinstance(generation, int) else 0,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items()))
        if isinstance(selector, Mapping)
        else (),
        models=tuple(str(m) for m in models) if isinstance(models, list) else (),
        defrag=defrag,
        problem=problem,
        last_round=parse_time(last) if isinstance(last, str) else None,
    )
