"""Leases reconciled against pods: a bound GPU pod whose GpuLease is gone gets it made again from
its allocation annotation; one whose annotation cannot be trusted is fenced; one that holds
capacity without an admission record is reported. The pure plan, then the reconciler's writes
and events against the in-memory cluster."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fake_cluster import FakeCluster, GiB, lease_json, pod_json

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.leases.restore import RESTORE_GRACE_S, RestorePlan, plan_restores
from gpupool.rfc3339 import format_time

NOW = 1_767_225_600.0


def allocation(offset_gib: int, gib: int, node: str = "n1") -> str:
    return json.dumps(
        [{"index": 0, "uuid": f"GPU-{node}-0", "model": "A100-80GB",
          "offsetBytes": offset_gib * GiB, "sizeBytes": gib * GiB, "computePercent": 0}]
    )  # fmt: skip


def running(
    name: str,
    offset_gib: int = 0,
    gib: int = 16,
    *,
    phase: str = "Running",
    created: float = 0.0,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod bound to n1, admitted, holding `gib` GiB at `offset_gib` of its card 0."""
    notes = {"gpupool.io/allocation": allocation(offset_gib, gib), **(annotations or {})}
    return pod_json(name, "alpha", gib, node="n1", phase=phase, admitted_at=NOW - 60,
                    annotations=notes, created=created)  # fmt: skip


def plan(pods: list[dict[str, Any]], leases: list[dict[str, Any]]) -> RestorePlan:
    return plan_restores([lease_from_json(le) for le in leases], [read_pod(p) for p in pods])


def test_a_running_pod_without_a_lease_gets_it_back_from_its_allocation() -> None:
    pod = running("a", 0, 16)
    result = plan([pod], [])
    [restore] = result.restore
    lease = restore.lease
    assert (lease.key, lease.node, lease.pod.uid) == ("ns/uid-a", "n1", "uid-a")
    assert [(s.uuid, s.offset_bytes, s.size_bytes) for s in lease.slices] == [
        ("GPU-n1-0", 0, 16 * GiB)
    ]
    assert result.fence == () and result.unadmitted == ()
    assert "made again from its gpupool.io/allocation" in restore.message


def test_a_restored_lease_is_charged_what_it_holds() -> None:
    # admitted for 500m of a smaller card (the most it could take); it holds 16Gi of a 72Gi card
    mark = json.dumps({"at": "2026-01-01T00:00:00Z", "borrowed": 0, "preemptible": False,
                       "resource": "gpu", "amount": 500})  # fmt: skip
    pod = running("m", 0, 16)
    pod["metadata"]["annotations"]["gpupool.io/admitted"] = mark
    cards = {"GPU-n1-0": 72 * GiB}
    [restore] = plan_restores([], [read_pod(pod)], cards).restore
    assert (restore.lease.resource, restore.lease.amount) == ("gpu", 223)  # 16/72, rounded up
    # without the card's size the milli share is unknown: the admitted amount stands
    [unsized] = plan_restores([], [read_pod(pod)]).restore
    assert unsized.lease.amount == 500
    # in bytes no card size is needed: the slice's bytes
    bytes_mark = json.dumps({"at": "2026-01-01T00:00:00Z", "borrowed": 0,
                             "preemptible": False, "resource": "gpu-memory",
                             "amount": 72 * GiB})  # fmt: skip
    whole = running("b", 0, 16)
    whole["metadata"]["annotations"]["gpupool.io/admitted"] = bytes_mark
    [in_bytes] = plan_restores([], [read_pod(whole)]).restore
    assert in_bytes.lease.amount == 16 * GiB


def test_a_pod_with_a_lease_in_any_phase_is_left_to_the_lifecycle() -> None:
    pod = running("a")
    for phase in (None, "Active", "Released"):
        assert plan([pod], [lease_json(pod, phase=phase, gib=16)]).restore == ()


def test_pods_that_hold_no_card_are_not_candidates() -> None:
    pending = pod_json("p", "alpha", admitted_at=NOW)  # not bound
    done = running("d", phase="Succeeded")
    assert plan([pending, done], []) == plan([], [])


def test_an_allocation_overlapping_another_pods_live_lease_is_fenced_not_restored() -> None:
    other = running("b", 0, 56)
    lost = running("a", 40, 16)  # bytes 40..56 Gi: inside b's lease
    result = plan([lost, other], [lease_json(other, gib=56, phase="Active")])
    assert result.restore == ()
    [fence] = result.fence
    assert fence.pod.name == "a" and "overlaps a live lease on card GPU-n1-0" in fence.why


def test_two_lost_pods_claiming_the_same_bytes_restore_only_the_first() -> None:
    first = running("a", 0, 16, created=1.0)
    second = running("b", 8, 16, created=2.0)
    result = plan([second, first], [])
    assert [r.pod.name for r in result.restore] == ["a"]
    assert [f.pod.name for f in result.fence] == ["b"]


def test_a_missing_or_unreadable_allocation_is_fenced_with_why() -> None:
    bare = pod_json("a", "alpha", node="n1", phase="Running", admitted_at=NOW)
    bad = running("b", annotations={"gpupool.io/allocation": "[{"})
    whys = {f.pod.name: f.why for f in plan([bare, bad], []).fence}
    assert whys["a"] == "it has no gpupool.io/allocation annotation"
    assert "malformed gpupool.io/allocation" in whys["b"]


def test_a_bound_gpu_pod_without_an_admission_record_is_reported() -> None:
    pod = pod_json("x", "alpha", node="n1", phase="Running",
                   annotations={"gpupool.io/allocation": allocation(0, 12)})  # fmt: skip
    result = plan([pod], [lease_json(pod)])
    assert [p.name for p in result.unadmitted] == ["x"]
    assert result.restore == () and result.fence == ()


# -- the reconciler ---------------------------------------------------------------------------
def _round(cluster: FakeCluster, reconciler: LeaseReconciler | None = None) -> LeaseReconciler:
    reconciler = reconciler or LeaseReconciler(cluster, lambda: NOW)
    asyncio.run(reconciler.reconcile())
    return reconciler


def test_the_reconciler_recreates_the_lease_with_an_event_and_the_next_round_activates_it() -> None:
    pod = running("a", 0, 16)
    cluster = FakeCluster(pods=[pod])
    _round(cluster)
    [(key, body)] = cluster.written("create_lease")
    assert key == "ns/uid-a"
    assert body["spec"]["devices"][0]["sizeBytes"] == 16 * GiB
    assert [(k, r) for k, r, _ in cluster.events] == [("ns/a", "LeaseRestored")]
    _round(cluster)  # the made-again lease moves on through the lifecycle, not made twice
    assert len(cluster.written("create_lease")) == 1
    [obj] = cluster.lease_objects.values()
    assert lease_from_json(obj).phase.name == "ACTIVE"


def test_the_reconciler_fences_an_untrusted_pod_and_keeps_the_other_ones_bytes() -> None:
    other = running("b", 0, 56)
    lost = running("a", 40, 16)
    cluster = FakeCluster(pods=[other, lost], leases=[lease_json(other, gib=56, phase="Active")])
    _round(cluster)
    assert cluster.written("create_lease") == []
    assert [k for k, _ in cluster.written("delete_pod")] == ["ns/a"]
    assert ("ns/a", "Fenced") in [(k, r) for k, r, _ in cluster.events]


def test_a_pod_reported_unadmitted_gets_one_event_not_one_per_round() -> None:
    pod = pod_json("x", "alpha", node="n1", phase="Running",
                   annotations={"gpupool.io/allocation": allocation(0, 12)})  # fmt: skip
    cluster = FakeCluster(pods=[pod], leases=[lease_json(pod, phase="Active")])
    reconciler = _round(cluster)
    _round(cluster, reconciler)
    assert [r for _, r, _ in cluster.events] == ["NotAdmitted"]


def _findings(metrics: ControllerMetrics) -> dict[str, float]:
    """gpupool_controller_integrity_findings_total by reason, as /metrics shows it."""
    return {
        s.labels["reason"]: s.value
        for family in metrics.registry.collect()
        if family.name == "gpupool_controller_integrity_findings"
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_each_integrity_event_moves_the_controllers_counter_once() -> None:
    metrics = ControllerMetrics()
    assert _findings(metrics) == {
        "NotAdmitted": 0, "LeaseRestored": 0, "Fenced": 0, "ChargeMismatch": 0
    }  # fmt: skip
    unadmitted = pod_json("x", "alpha", node="n1", phase="Running",
                          annotations={"gpupool.io/allocation": allocation(60, 12)})  # fmt: skip
    other = running("b", 0, 40)
    lost = running("a", 0, 16, created=1.0)  # inside b's live lease: fenced
    gone = running("c", 40, 16, created=2.0)  # free bytes: its lease is made again
    cluster = FakeCluster(
        pods=[unadmitted, other, lost, gone],
        leases=[lease_json(unadmitted, phase="Active"), lease_json(other, gib=40, phase="Active")],
    )
    reconciler = LeaseReconciler(cluster, lambda: NOW, on_integrity=metrics.record_integrity)
    _round(cluster, reconciler)
    assert sorted(r for _, r, _ in cluster.events) == ["Fenced", "LeaseRestored", "NotAdmitted"]
    assert _findings(metrics) == {
        "NotAdmitted": 1, "LeaseRestored": 1, "Fenced": 1, "ChargeMismatch": 0
    }  # fmt: skip
    _round(cluster, reconciler)  # nothing new: the lease is back, the fenced pod gone, x reported
    assert _findings(metrics) == {
        "NotAdmitted": 1, "LeaseRestored": 1, "Fenced": 1, "ChargeMismatch": 0
    }  # fmt: skip


def _bound(pod: dict[str, Any], at: float) -> dict[str, Any]:
    status = pod.setdefault("status", {})
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(at)}
    ]
    return pod


def test_a_pod_bound_moments_ago_waits_for_the_lease_the_extender_is_creating() -> None:
    """The extender creates the lease just after the Binding: within the grace the pod is not
    one that lost its lease; after it, or with no known bind time, it is restored."""
    fresh = read_pod(_bound(running("fresh"), NOW - 5))
    old = read_pod(_bound(running("old", 16, 16), NOW - RESTORE_GRACE_S - 1))
    unknown = read_pod(running("unknown", 32, 16))
    assert fresh.bound_at == NOW - 5
    result = plan_restores([], [fresh, old, unknown], now=NOW)
    assert sorted(r.pod.name for r in result.restore) == ["old", "unknown"]
    later = plan_restores([], [fresh], now=NOW + RESTORE_GRACE_S)
    assert [r.pod.name for r in later.restore] == ["fresh"]
