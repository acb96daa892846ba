"""What the admission queue recorded on a pod when it removed the quota gate
(`gpupool.io/admitted`, JSON `{at, borrowed, preemptible, reason}`), as the extender's bind needs
it: the borrowed amount and the pod's whole amount, in the tenant quota's resource (named in the
record), and whether the pod is preemptible, so the pod's GpuLease says in one unit what it holds
and whether reclaim may take it. Pure; unreadable means "not borrowed".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.adapters.wire import names
from gpupool.quota.resource import Resource

RESOURCES = {r.value for r in Resource}


@dataclass(frozen=True, slots=True)
class AdmittedMark:
    borrowed: int = 0  # the part of the pod's amount above its tenant's nominal quota
    preemptible: bool = False
    resource: str | None = None  # the quota's resource the two amounts are in ("gpu", ...)
    amount: int | None = None  # the pod's whole amount in that resource


def read_admitted(annotations: Mapping[str, str] | None) -> AdmittedMark:
    """The pod's borrowed amount and preemptible flag from `gpupool.io/admitted`."""
    text = (annotations or {}).get(names.ANN_ADMITTED)
    if not text:
        return AdmittedMark()
    try:
        data = json.loads(text)
        borrowed = int(data.get("borrowed", 0))
        preemptible = data.get("preemptible", False) is True
        resource = data.get("resource")
        amount = data.get("amount")
        amount = int(amount) if amount is not None else None
    except (ValueError, TypeError, AttributeError):
        return AdmittedMark()
    if resource not in RESOURCES or amount is None or amount < 0:
        resource, amount = None, None  # an older record, or one we cannot read: bytes
    return AdmittedMark(max(0, borrowed), preemptible, resource, amount)
