"""The GpuLease the extender's bind plans: `amount` and `borrowed` in one unit, the tenant
quota's resource as the admission queue recorded it (milli-GPU for a `gpu` quota), else bytes."""

from __future__ import annotations

import json
from typing import Any

from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.lease_plan import plan_lease
from gpupool.adapters.extender_http.plans import Planners
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.node import read_node
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord


def _pod(admitted: dict[str, Any] | None) -> dict[str, Any]:
    """A 20Gi slice whose admission queue recorded `admitted` (None: no record)."""
    annotations = None if admitted is None else {"gpupool.io/admitted": json.dumps(admitted)}
    return pod_json(
        "p", namespace="t", uid="uid-p", gpu_memory="20Gi", vgpu=1, annotations=annotations
    )


def _plan(pod: dict[str, Any]) -> LeaseRecord:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json("n", cards=2)]], [], [])
    planner = Planners("binpack").of(None)
    planned = plan_lease(cache, planner, ScheduledPod.from_json(pod), "n", [])
    assert isinstance(planned, LeaseRecord), planned
    return planned


def test_gpu_quota_lease_counts_milli_gpu() -> None:
    lease = _plan(_pod({"borrowed": 250, "resource": "gpu", "amount": 250}))
    assert (lease.resource, lease.amount, lease.borrowed) == ("gpu", 250, 250)
    assert sum(s.size_bytes for s in lease.slices) == 20 * GiB  # the slice itself is bytes


def test_memory_quota_or_no_record_counts_bytes() -> None:
    lease = _plan(_pod({"borrowed": 4 * GiB, "resource": "gpu-memory", "amount": 20 * GiB}))
    assert (lease.resource, lease.amount, lease.borrowed) == ("gpu-memory", 20 * GiB, 4 * GiB)
    bare = _plan(_pod(None))
    assert (bare.resource, bare.amount, bare.borrowed) == ("gpu-memory", 20 * GiB, 0)


def test_borrowed_never_exceeds_amount() -> None:
    lease = _plan(_pod({"borrowed": 900, "resource": "gpu", "amount": 250}))
    assert lease.borrowed == 250
