"""What the admission queue recorded on a pod when it removed the quota gate (`Admitted`).

Read by the controllers (quota counting, reclaim) and the extender's bind (the GpuLease says in
one unit what the pod holds and whether reclaim may take it). The annotation's JSON
(`gpupool.io/admitted`) is read and written in `adapters.wire.admitted`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admitted:
    at: float  # when the gate was removed (epoch seconds; 0.0 if the record has no time)
    borrowed: int = 0  # the part of the pod's amount above its tenant's nominal quota
    preemptible: bool = False
    resource: str | None = None  # the quota's resource the two amounts are in ("gpu", ...)
    amount: int | None = None  # the pod's whole amount in that resource
