"""The controllers' status writes of a GpuQuota, GpuNode and GpuPool (`state.status_writes`) as
the merge patches' `status` the CRDs take, and what the API server holds read back into the same
values (`stored_status`), for the writer to compare its own with and keep others' conditions.

A stored field that is missing or not of the type the controller writes decodes as "not what
the controller would write" (the writer writes again), as comparing the JSON did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.state.status_writes import (
    BudgetFields,
    Condition,
    GpuNodeHealthWrite,
    PoolFields,
    PoolStatusWrite,
    QueueLine,
    QuotaStatusWrite,
    StoredStatus,
)

Json = dict[str, Any]

BUDGET_FIELDS = (
    "hoursUsed",
    "hoursRemaining",
    "hoursLimit",
    "hoursUnit",
    "hoursPerHour",
    "windowStart",
    "windowEnd",
    "budgetExhausted",
    "exhaustionForecast",
)


# -- encoding ------------------------------------------------------------------------------------
def condition_json(c: Condition) -> Json:
    out: Json = {"type": c.type, "status": c.status}
    if c.reason is not None:
        out["reason"] = c.reason
    if c.message is not None:
        out["message"] = c.message
    if c.last_transition_time is not None:
        out["lastTransitionTime"] = c.last_transition_time
    if c.observed_generation is not None:
        out["observedGeneration"] = c.observed_generation
    return out


def budget_json(b: BudgetFields | None) -> Json:
    """The budget's fields; None: each removed (a merge-patch null)."""
    if b is None:
        return dict.fromkeys(BUDGET_FIELDS)
    return {
        "hoursUsed": b.hours_used,
        "hoursRemaining": b.hours_remaining,
        "hoursLimit": b.hours_limit,
        "hoursUnit": b.hours_unit,
        "hoursPerHour": b.hours_per_hour,
        "windowStart": b.window_start,
        "windowEnd": b.window_end,
        "budgetExhausted": b.budget_exhausted,
        "exhaustionForecast": b.exhaustion_forecast,
    }


def quota_status_json(s: QuotaStatusWrite) -> Json:
    out: Json = {
        "used": s.used,
        "usedAmount": s.used_amount,
        "borrowed": s.borrowed,
        "borrowedAmount": s.borrowed_amount,
        "lent": s.lent,
        "lentAmount": s.lent_amount,
        "pods": s.pods,
        "queued": s.queued,
        "queue": [
            {"namespace": q.namespace, "name": q.name, "position": q.position, "reason": q.reason}
            for q in s.queue
        ],
    }
    if s.observed_generation is not None:
        out["observedGeneration"] = s.observed_generation
    return out | budget_json(s.budget)


def pool_fields_json(f: PoolFields) -> Json:
    return {
        "observedGeneration": f.observed_generation,
        "nodes": f.nodes,
        "gpus": f.gpus,
        "capacity": f.capacity,
        "capacityBytes": f.capacity_bytes,
        "allocated": f.allocated,
        "allocatedBytes": f.allocated_bytes,
        "fragmentation": f.fragmentation,
        "cardsOverThreshold": f.cards_over_threshold,
    }


def pool_status_json(w: PoolStatusWrite) -> Json:
    out: Json = {} if w.fields is None else pool_fields_json(w.fields)
    if w.conditions is not None:
        out["conditions"] = [condition_json(c) for c in w.conditions]
    if w.defrag is not None:
        d = w.defrag
        out["defrag"] = {
            "lastRound": d.last_round,
            "moves": d.moves,
            "cleared": d.cleared,
            "fragmentationBefore": d.fragmentation_before,
            "fragmentationAfter": d.fragmentation_after,
        }
    return out


def gpu_node_health_json(w: GpuNodeHealthWrite) -> Json:
    return {"health": w.health, "conditions": [condition_json(c) for c in w.conditions]}


# -- decoding what is stored ---------------------------------------------------------------------
class _Unlike(Exception):
    """A stored field is not what the controller writes there."""


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _Unlike(key)
    return value


def _opt_str(obj: Mapping[str, Any], key: str) -> str | None:
    return None if obj.get(key) is None else _str(obj, key)


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Unlike(key)
    return value


def _opt_int(obj: Mapping[str, Any], key: str) -> int | None:
    return None if obj.get(key) is None else _int(obj, key)


def _float(obj: Mapping[str, Any], key: str) -> float:
    value = obj.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _Unlike(key)
    return value


def _conditions(status: Mapping[str, Any]) -> tuple[Condition, ...]:
    """Each condition that has a type and a status (others cannot be told apart; left out)."""
    out = []
    for c in status.get("conditions") or ():
        if not isinstance(c, Mapping):
            continue
        try:
            out.append(
                Condition(
                    _str(c, "type"),
                    _str(c, "status"),
                    _opt_str(c, "reason"),
                    _opt_str(c, "message"),
                    _opt_str(c, "lastTransitionTime"),
                    _opt_int(c, "observedGeneration"),
                )
            )
        except _Unlike:
            continue
    return tuple(out)


def _budget(status: Mapping[str, Any]) -> BudgetFields | None:
    if all(status.get(k) is None for k in BUDGET_FIELDS):
        return None
    exhausted = status.get("budgetExhausted")
    if not isinstance(exhausted, bool):
        raise _Unlike("budgetExhausted")
    return BudgetFields(
        _float(status, "hoursUsed"),
        _float(status, "hoursRemaining"),
        _float(status, "hoursLimit"),
        _str(status, "hoursUnit"),
        _float(status, "hoursPerHour"),
        _str(status, "windowStart"),
        _str(status, "windowEnd"),
        exhausted,
        _opt_str(status, "exhaustionForecast"),
    )


def _queue(status: Mapping[str, Any]) -> tuple[QueueLine, ...]:
    queue = status.get("queue")
    if not isinstance(queue, list):
        raise _Unlike("queue")
    out = []
    for q in queue:
        if not isinstance(q, Mapping):
            raise _Unlike("queue")
        out.append(QueueLine(_str(q, "namespace"), _str(q, "name"), _int(q, "position"),
                             _str(q, "reason")))  # fmt: skip
    return tuple(out)


def _quota(status: Mapping[str, Any]) -> QuotaStatusWrite | None:
    try:
        return QuotaStatusWrite(
            _str(status, "used"),
            _int(status, "usedAmount"),
            _str(status, "borrowed"),
            _int(status, "borrowedAmount"),
            _str(status, "lent"),
            _int(status, "lentAmount"),
            _int(status, "pods"),
            _int(status, "queued"),
            _queue(status),
            _opt_int(status, "observedGeneration"),
            _budget(status),
        )
    except _Unlike:
        return None


def _pool(status: Mapping[str, Any]) -> PoolFields | None:
    try:
        return PoolFields(
            _int(status, "observedGeneration"),
            _int(status, "nodes"),
            _int(status, "gpus"),
            _str(status, "capacity"),
            _int(status, "capacityBytes"),
            _str(status, "allocated"),
            _int(status, "allocatedBytes"),
            _str(status, "fragmentation"),
            _int(status, "cardsOverThreshold"),
        )
    except _Unlike:
        return None


def stored_status(kind: str, status: object) -> StoredStatus:
    """`status` (an object's `status` as listed) decoded for the writer of `kind`'s status."""
    if not isinstance(status, Mapping):
        return StoredStatus()
    return StoredStatus(
        _conditions(status),
        _quota(status) if kind == "GpuQuota" else None,
        _pool(status) if kind == "GpuPool" else None,
    )
