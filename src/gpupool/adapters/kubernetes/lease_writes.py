"""The controllers' GpuLease writes (`state.lease_writes`) as the merge patches the API server
takes: `status` (a move of phase, an eviction's mark, the end of a room hold) and `spec` (the
lease's expiry terms). `adapters.kubernetes.lease` reads them back."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.lease import phase_name
from gpupool.adapters.wire.times import format_time
from gpupool.state.lease_writes import EvictionMark, LeaseStatusWrite

MESSAGE_CHARS = 1024  # a mark's message, as an Event's


def lease_status(write: LeaseStatusWrite) -> dict[str, Any]:
    name = phase_name(write.phase)
    status: dict[str, Any] = {
        "phase": name,
        "conditions": [
            {
                "type": write.condition or name,
                "status": "True",
                "reason": write.reason,
                "message": write.message,
                "lastTransitionTime": format_time(write.at),
            }
        ],
    }
    if write.bound_at is not None:
        status["boundAt"] = format_time(write.bound_at)
    if write.active_at is not None:
        status["activeAt"] = format_time(write.active_at)
    if write.ended_at is not None:
        status["end"] = format_time(write.ended_at)
    if write.gib_hours is not None:
        status["gibHours"] = round(write.gib_hours, 6)
    return status


def eviction_mark(mark: EvictionMark) -> dict[str, Any]:
    """`status.reclaim` (`read_reclaim_record`, `read_room_hold` read it back)."""
    record = mark.record
    out: dict[str, Any] = {
        "at": format_time(record.at),
        "reason": record.reason,
        "message": record.message[:MESSAGE_CHARS],
    }
    if mark.hold is not None:
        hold = mark.hold
        out |= {"room": hold.node, "for": hold.pod, "forUid": hold.uid,
                "holdUntil": format_time(hold.until)}  # fmt: skip
    return out


ROOM_HOLD_ENDED: dict[str, Any] = {"reclaim": {"holdUntil": None}}  # the record stays


def expiry_spec(ttl_s: float, expiry: float, renewal: str | None) -> dict[str, Any]:
    """The lease's expiry terms (`spec`): its TTL, when it expires, the renewal it answers."""
    return {"expiry": format_time(expiry), "ttlSeconds": ttl_s, "renewal": renewal}
