"""The GpuLease the extender's bind plans: `amount` and `borrowed` in one unit, the tenant
quota's resource as the admission queue recorded it (milli-GPU for a `gpu` quota), else bytes;
its compute mode from the pod and the operators' defaults for the card it landed on."""

from __future__ import annotations

import json
from typing import Any

from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.lease_plan import plan_lease
from gpupool.adapters.extender_http.plans import Planners
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.wire.compute_modes import read_compute_modes
from gpupool.domain.compute_modes import BUILT_IN, ComputeModes
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord


def _pod(admitted: dict[str, Any] | None) -> dict[str, Any]:
    """A 20Gi slice whose admission queue recorded `admitted` (None: no record)."""
    annotations = None if admitted is None else {"gpupool.io/admitted": json.dumps(admitted)}
    return pod_json(
        "p", namespace="t", uid="uid-p", gpu_memory="20Gi", vgpu=1, annotations=annotations
    )


def _plan(
    pod: dict[str, Any], modes: ComputeModes = BUILT_IN, model: str = "A100-80GB"
) -> LeaseRecord:
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in [node_json("n", cards=2, model=model)]], [], [])
    planner = Planners("binpack").of(None)
    planned = plan_lease(cache, planner, ScheduledPod.from_json(pod), "n", [], modes)
    assert isinstance(planned, LeaseRecord), planned
    return planned


def test_gpu_quota_lease_counts_milli_gpu() -> None:
    # 20Gi of an A100-80GB's 72Gi allocatable is 278m (rounded up): what the lease holds
    lease = _plan(_pod({"borrowed": 278, "resource": "gpu", "amount": 278}))
    assert (lease.resource, lease.amount, lease.borrowed) == ("gpu", 278, 278)
    assert sum(s.size_bytes for s in lease.slices) == 20 * GiB  # the slice itself is bytes


def test_the_lease_is_charged_what_it_holds_not_the_admitted_bound() -> None:
    # admission counted the most the pod could take (a smaller card); the card it got is bigger
    lease = _plan(_pod({"borrowed": 0, "resource": "gpu", "amount": 500}))
    assert (lease.resource, lease.amount) == ("gpu", 278)
    mark = {"gpupool.io/admitted": json.dumps({"resource": "gpu-memory", "amount": 160 * GiB})}
    whole = _plan(
        pod_json("w", namespace="t", uid="uid-w", limits={"gpupool.io/gpu": "2"}, vgpu=2,
                 annotations=mark)
    )  # fmt: skip
    assert whole.amount == 2 * 72 * GiB == sum(s.size_bytes for s in whole.slices)


def test_a_holding_above_what_admission_counted_is_refused() -> None:
    cache = ClusterCache()
    cache.rebuild([read_node(node_json("n", cards=2))], [], [])
    pod = _pod({"borrowed": 0, "resource": "gpu", "amount": 250})
    planned = plan_lease(cache, Planners("binpack").of(None), ScheduledPod.from_json(pod), "n", [])
    assert isinstance(planned, Refusal) and planned.why is Why.OVER_CHARGE
    assert "would hold 278m, more than the 250m" in planned.message


def test_memory_quota_or_no_record_counts_bytes() -> None:
    lease = _plan(_pod({"borrowed": 4 * GiB, "resource": "gpu-memory", "amount": 20 * GiB}))
    assert (lease.resource, lease.amount, lease.borrowed) == ("gpu-memory", 20 * GiB, 4 * GiB)
    bare = _plan(_pod(None))
    assert (bare.resource, bare.amount, bare.borrowed) == ("gpu-memory", 20 * GiB, 0)


def test_borrowed_never_exceeds_amount() -> None:
    lease = _plan(_pod({"borrowed": 900, "resource": "gpu", "amount": 300}))
    assert (lease.amount, lease.borrowed) == (278, 278)


MODES = read_compute_modes(
    {"inference": "mps: true, activeThreadPercentage: 40", "L4.inference": "mps: false"}
)


def _annotated(**annotations: str) -> dict[str, Any]:
    pod = _pod(None)
    pod["metadata"].setdefault("annotations", {}).update(annotations)
    return pod


def test_the_lease_carries_the_compute_mode_bind_decided_and_reads_back() -> None:
    lease = _plan(_pod(None), MODES)
    assert (lease.compute_mode, lease.mps_percentage) == ("mps", 40)
    spec = lease_to_json(lease)["spec"]
    assert (spec["computeMode"], spec["mpsActiveThreadPercentage"]) == ("mps", 40)
    back = lease_from_json(lease_to_json(lease))
    assert (back.compute_mode, back.mps_percentage) == ("mps", 40)
    assert (_plan(_pod(None), MODES, "L4").compute_mode, _plan(_pod(None)).compute_mode) == (
        "none",
        "none",
    )


def test_the_pods_annotations_decide_before_the_defaults() -> None:
    training = _plan(_annotated(**{"gpupool.io/workload": "training"}), MODES)
    assert (training.compute_mode, training.mps_percentage) == ("none", None)
    opted_out = _plan(_annotated(**{"gpupool.io/compute-mode": "none"}), MODES)
    assert opted_out.compute_mode == "none"
    asked = _plan(_annotated(**{"gpupool.io/compute-mode": "mps"}))
    assert (asked.compute_mode, asked.mps_percentage) == ("mps", 100)
    none_spec = lease_to_json(training)["spec"]
    assert none_spec["computeMode"] == "none" and "mpsActiveThreadPercentage" not in none_spec
