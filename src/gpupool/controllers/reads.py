"""The reads every reconciler shares: GpuLease JSON → records, an unreadable one logged and left
out (it holds nothing the controllers could act on; the extender fences its node)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.ports import Json
from gpupool.state.lease import LeaseRecord


def read_leases(objects: Iterable[Json], log: logging.Logger) -> list[LeaseRecord]:
    records = []
    for obj in objects:
        try:
            records.append(lease_from_json(obj))
        except InvalidObject as err:
            log.error("ignoring an unreadable GpuLease: %s", err)
    return records
