"""The reads every reconciler shares: GpuLease JSON → records, an unreadable one logged and left
out (it holds nothing the controllers could act on; the extender fences its node). Within a
loop, `decode_leases` and `decode_pods` read each object alone through the loop's
`Containment`: one that cannot be read is set aside with a ReconcileFailed event."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gpupool.adapters.kubernetes.decoded import lease_from_json, read_pod
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.controllers.contain import Containment
from gpupool.ports import Json
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView

READ = "read"  # the step name of decoding, in every loop


def read_leases(objects: Iterable[Json], log: logging.Logger) -> list[LeaseRecord]:
    records = []
    for obj in objects:
        try:
            records.append(lease_from_json(obj))
        except InvalidObject as err:
            log.error("ignoring an unreadable GpuLease: %s", err)
    return records


def decode_leases(contain: Containment, objects: Iterable[Json], now: float) -> list[LeaseRecord]:
    return [le for le, _ in contain.decode(READ, "GpuLease", objects, lease_from_json, now)]


def decode_pods(
    contain: Containment, objects: Iterable[Json], now: float
) -> list[tuple[PodView, Json]]:
    """(view, JSON) of each pod that reads."""
    return contain.decode(READ, "Pod", objects, read_pod, now)
