"""What the admission queue records on a pod when it removes the quota gate (`gpupool.io/admitted`,
JSON `{at, borrowed, preemptible, reason, resource, amount}`), written by the controller and read
by the controller (quota counting) and the extender's bind (the GpuLease says in one unit what the
pod holds and whether reclaim may take it). Pure; one parser for both readers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.adapters.wire import names
from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.quota.resource import Resource

RESOURCES = {r.value for r in Resource}


@dataclass(frozen=True, slots=True)
class Admitted:
    at: float  # when the gate was removed (epoch seconds; 0.0 if the record has no time)
    borrowed: int = 0  # the part of the pod's amount above its tenant's nominal quota
    preemptible: bool = False
    resource: str | None = None  # the quota's resource the two amounts are in ("gpu", ...)
    amount: int | None = None  # the pod's whole amount in that resource

    def to_annotation(self, reason: str) -> str:
        record: dict[str, object] = {
            "at": format_time(self.at),
            "borrowed": self.borrowed,
            "preemptible": self.preemptible,
            "reason": reason,
        }
        if self.resource is not None and self.amount is not None:
            record |= {"resource": self.resource, "amount": self.amount}
        return json.dumps(record, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> Admitted | None:
        """The record, or None when there is none or it cannot be read."""
        if not text:
            return None
        try:
            data = json.loads(text)
            borrowed = int(data.get("borrowed", 0))
            preemptible = data.get("preemptible", False) is True
            resource = data.get("resource")
            amount = data.get("amount")
            amount = int(amount) if amount is not None else None
            at = parse_time(data.get("at"))
        except (ValueError, TypeError, AttributeError):
            return None
        if resource not in RESOURCES or amount is None or amount < 0:
            resource, amount = None, None  # an older record, or one we cannot read: bytes
        return cls(at or 0.0, max(0, borrowed), preemptible, resource, amount)


def read_admitted(annotations: Mapping[str, str] | None) -> Admitted:
    """The pod's record from its annotations; without a readable one: not borrowed, bytes."""
    found = Admitted.from_annotation((annotations or {}).get(names.ANN_ADMITTED))
    return found if found is not None else Admitted(0.0)
