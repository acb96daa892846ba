"""GpuPool JSON → the typed `state.pool.PoolObject`, every setting checked once here. The CRD's
schema rules out most bad values; a value it cannot rule out (an object stored before a rule, a
notice longer than the round's timeout) is not raised but kept on the object as a problem — of
the pool's scope (selector, models, threshold: `problem`) or of its defragmentation settings
(`defrag_problem`) — which the loops report as a condition on the GpuPool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire.times import parse_time
from gpupool.state.pool import DEFAULT_THRESHOLD_PCT, InvalidPoolSpec, PoolDefrag, PoolObject


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
    return PoolDefrag(interval, notice, timeout, max_moves, orphans)


def _scope(
    name: str, spec: Mapping[str, Any]
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], int]:
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise InvalidPoolSpec(f"GpuPool {name}: spec.nodeSelector must map labels to values")
    models = spec.get("models") or []
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise InvalidPoolSpec(f"GpuPool {name}: spec.models must be a list of model names")
    threshold = spec.get("defragThresholdPercent", DEFAULT_THRESHOLD_PCT)
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 <= threshold <= 100:
        raise InvalidPoolSpec(
            f"GpuPool {name}: spec.defragThresholdPercent is a percentage of a card's memory "
            f"from 0 to 100; got {threshold!r}"
        )
    return tuple(sorted((str(k), str(v)) for k, v in selector.items())), tuple(models), threshold


def read_pool(obj: Mapping[str, Any]) -> PoolObject:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name") or "")
    generation = meta.get("generation")
    pool = PoolObject(name, generation if isinstance(generation, int) else 0)
    try:
        selector, models, threshold = _scope(name, spec)
    except InvalidPoolSpec as err:
        return PoolObject(pool.name, pool.generation, problem=str(err))
    defrag: PoolDefrag | None = None
    problem: str | None = None
    try:
        defrag = read_defrag(spec)
    except InvalidPoolSpec as err:
        problem = str(err)
    history = status.get("defrag") if isinstance(status, Mapping) else None
    last = history.get("lastRound") if isinstance(history, Mapping) else None
    return PoolObject(
        name=pool.name,
        generation=pool.generation,
        node_selector=selector,
        models=models,
        threshold_pct=threshold,
        defrag=defrag,
        defrag_problem=problem,
        last_round=parse_time(last) if isinstance(last, str) else None,
    )
