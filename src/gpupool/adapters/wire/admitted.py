"""What the admission queue recorded on a pod when it removed the quota gate
(`gpupool.io/admitted`, JSON `{at, borrowed, preemptible, reason}`), as the extender's bind needs
it: the borrowed amount (in the tenant quota's unit) and whether the pod is preemptible, so the
pod's GpuLease says whether reclaim may take it. Pure; unreadable means "not borrowed".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.adapters.wire import names


@dataclass(frozen=True, slots=True)
class AdmittedMark:
    borrowed: int = 0  # the part of the pod's amount above its tenant's nominal quota
    preemptible: bool = False


def read_admitted(annotations: Mapping[str, str] | None) -> AdmittedMark:
    """The pod's borrowed amount and preemptible flag from `gpupool.io/admitted`."""
    text = (annotations or {}).get(names.ANN_ADMITTED)
    if not text:
        return AdmittedMark()
    try:
        data = json.loads(text)
        borrowed = int(data.get("borrowed", 0))
        preemptible = data.get("preemptible", False) is True
    except (ValueError, TypeError, AttributeError):
        return AdmittedMark()
    return AdmittedMark(max(0, borrowed), preemptible)
