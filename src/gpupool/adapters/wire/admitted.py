"""The `gpupool.io/admitted` annotation (JSON `{at, borrowed, preemptible, reason, resource,
amount}`) ⇄ the typed `state.admitted.Admitted`, written by the controller and read by the
controller and the extender's bind. One parser for both readers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gpupool.adapters.wire import names
from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.quota.resource import Resource
from gpupool.state.admitted import Admitted

__all__ = ["Admitted", "admitted_annotation", "parse_admitted", "read_admitted"]

RESOURCES = {r.value for r in Resource}


def admitted_annotation(record: Admitted, reason: str) -> str:
    """The annotation's text for `record`, with why the pod was admitted."""
    data: dict[str, object] = {
        "at": format_time(record.at),
        "borrowed": record.borrowed,
        "preemptible": record.preemptible,
        "reason": reason,
    }
    if record.resource is not None and record.amount is not None:
        data |= {"resource": record.resource, "amount": record.amount}
    return json.dumps(data, separators=(",", ":"))


def parse_admitted(text: str | None) -> Admitted | None:
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
    return Admitted(at or 0.0, max(0, borrowed), preemptible, resource, amount)


def read_admitted(annotations: Mapping[str, str] | None) -> Admitted:
    """The pod's record from its annotations; without a readable one: not borrowed, bytes."""
    found = parse_admitted((annotations or {}).get(names.ANN_ADMITTED))
    return found if found is not None else Admitted(0.0)
