"""Reclaim of borrowed quota: the controller's pure plan over a snapshot of pods, leases, quotas.

The cohort in most tests: tenants `alpha` (the lender, nominal 24Gi) and `beta` (nominal 24Gi,
all of it guaranteed), 3 s grace. Beta runs four 12Gi pods: b1, b2 within its nominal quota,
b3, b4 borrowed from alpha's idle quota, so the cohort's pool (48Gi) is full when alpha submits.
"""

from __future__ import annotations

import json
from typing import Any

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_patches import annotate_patch
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.admitted import Admitted, read_admitted
from gpupool.adapters.wire.names import ANN_RECLAIM_NOTICE as RECLAIM_ANN
from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.adapters.wire.reclaim_notice import notice_annotation, parse_notice
from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.controllers.admission.charge import mark_borrowed
from gpupool.controllers.admission.plan import plan_admission
from gpupool.controllers.reclaim.plan import ReclaimRound, plan_reclaim_round
from gpupool.controllers.reclaim.room import Placement
from gpupool.domain.units import GiB
from gpupool.quota.queue import FifoMode
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord, PodRef, RoomHold
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

T0 = "2026-01-01T00:00:00.000000Z"
NOW = (parse_time(T0) or 0.0) + 100.0


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000000Z"


def admitted(second: int, borrowed_gib: int = 0) -> str:
    return json.dumps({"at": at(second), "borrowed": borrowed_gib * GiB, "preemptible": False})


def pod(
    name: str,
    tenant: str,
    *,
    admitted_at: int | None = None,
    borrowed_gib: int = 0,
    priority: int = 0,
    memory: str = "12Gi",
    notice: ReclaimNotice | None = None,
    exclusive: bool = False,
    submitted: int = 0,
) -> PodView:
    annotations = {"gpupool.io/queued-at": at(submitted)}
    if admitted_at is not None:
        annotations["gpupool.io/admitted"] = admitted(admitted_at, borrowed_gib)
    if notice is not None:
        annotations["gpupool.io/reclaim-notice"] = notice_annotation(notice)
    if exclusive:
        annotations["gpupool.io/exclusive"] = "true"
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"gpupool.io/tenant": tenant},
            "annotations": annotations,
        },
        "spec": {
            "priority": priority,
            "schedulingGates": [] if admitted_at is not None else [{"name": "gpupool.io/quota"}],
            "containers": [
                {"name": "main", "resources": {"limits": {"gpupool.io/gpu-memory": memory}}}
            ],
        },
        "status": {"phase": "Running" if admitted_at is not None else "Pending"},
    }
    return read_pod(obj)


def lease(p: PodView, borrowed_gib: int | None = None) -> LeaseRecord:
    """The pod's GpuLease as bind writes it (borrowed copied from the admitted annotation)."""
    if borrowed_gib is None:
        borrowed = p.admitted.borrowed if p.admitted else 0
    else:
        borrowed = borrowed_gib * GiB
    ref = PodRef(p.namespace, p.name, p.uid)
    amount = (p.request.gpu_memory_bytes or 0) * p.request.gpu_count if p.request else 0
    return LeaseRecord(
        p.uid, p.namespace, p.tenant, ref, p.node or "", (), amount=amount, borrowed=borrowed
    )


def reclaim_round(
    pods: list[PodView],
    leases: list[LeaseRecord],
    quotas: list[TenantQuota],
    now: float,
    *,
    mode: FifoMode = FifoMode.BEST_EFFORT,
    placement: Placement | None = None,
    holds: dict[str, RoomHold] | None = None,
) -> ReclaimRound:
    """One controller round as the reconcilers run it: the admission plan over the pods (borrowed
    marks from their leases), then the reclaim plan that consumes it."""
    views = mark_borrowed(pods, leases)
    admission = plan_admission(views, quotas, now, default_tenant=DEFAULT_TENANT, mode=mode)
    return plan_reclaim_round(admission, views, now, placement=placement, holds=holds)


def quotas(beta_guaranteed_gib: int = 24) -> list[TenantQuota]:
    return [
        TenantQuota("alpha", nominal=24 * GiB, cohort="c", reclaim_grace_s=3),
        TenantQuota(
            "beta",
            nominal=24 * GiB,
            guaranteed=beta_guaranteed_gib * GiB,
            cohort="c",
            reclaim_grace_s=3,
        ),
    ]


def beta_pods(**overrides: dict[str, Any]) -> list[PodView]:
    specs: dict[str, dict[str, Any]] = {
        "b1": {"admitted_at": 1},
        "b2": {"admitted_at": 2},
        "b3": {"admitted_at": 3, "borrowed_gib": 12},
        "b4": {"admitted_at": 4, "borrowed_gib": 12},
    }
    for name, extra in overrides.items():
        specs[name] = {**specs[name], **extra}
    return [pod(name, "beta", **spec) for name, spec in specs.items()]


def names(items: Any) -> list[str]:
    return sorted(i.pod.name for i in items)


def test_lender_waiting_gets_the_newest_borrowed_pod_noticed_with_its_grace_period() -> None:
    beta = beta_pods()
    waiting = pod("a1", "alpha", submitted=50)
    plan = reclaim_round([*beta, waiting], [lease(p) for p in beta], quotas(), NOW)
    assert names(plan.notices) == ["b4"]
    [notice] = plan.notices
    assert notice.notice.evict_at == NOW + 3
    assert notice.notice.claimant == "alpha" and notice.notice.claimant_pod == "ns/a1"
    assert "grace period 3s" in notice.message and "ns/a1" in notice.message
    assert plan.evictions == () and plan.withdrawals == () and plan.stuck == ()


def test_lowest_priority_borrowed_pod_goes_before_the_newest() -> None:
    beta = beta_pods(b3={"priority": -5})
    plan = reclaim_round(
        [*beta, pod("a1", "alpha", submitted=50)], [lease(p) for p in beta], quotas(), NOW
    )
    assert names(plan.notices) == ["b3"]


def test_nothing_happens_while_the_lender_does_not_wait() -> None:
    beta = beta_pods()
    plan = reclaim_round(beta, [lease(p) for p in beta], quotas(), NOW)
    assert plan.notices == () and plan.evictions == () and plan.withdrawals == ()


def test_a_given_notice_counts_and_the_eviction_falls_due_after_the_grace_period() -> None:
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    beta = beta_pods(b4={"notice": notice})
    waiting = pod("a1", "alpha", submitted=50)
    leases = [lease(p) for p in beta]
    # within the grace period: nobody else is noticed, nobody is evicted yet
    early = reclaim_round([*beta, waiting], leases, quotas(), NOW + 2.9)
    assert early.notices == () and early.evictions == () and early.withdrawals == ()
    # a restarted controller reads the deadline from the pod: due now, b4 only
    due = reclaim_round([*beta, waiting], leases, quotas(), NOW + 3)
    assert names(due.evictions) == ["b4"] and due.notices == ()
    assert "give tenant alpha its quota back" in due.evictions[0].message


def test_second_waiting_pod_gets_a_second_victim() -> None:
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    beta = beta_pods(b4={"notice": notice})
    waiting = [pod("a1", "alpha", submitted=50), pod("a2", "alpha", submitted=51)]
    plan = reclaim_round([*beta, *waiting], [lease(p) for p in beta], quotas(), NOW + 1)
    assert names(plan.notices) == ["b3"]
    assert plan.notices[0].notice.claimant_pod == "ns/a2"


def test_never_below_guaranteed() -> None:
    """Beta holds 36Gi (nominal 24Gi): b1 12Gi, and b2 24Gi of which 12Gi borrowed. Alpha
    holds 12Gi and waits for 12Gi more. Taking b2 would leave beta 12Gi, under a 24Gi
    guarantee: nothing is noticed and the waiting pod says why; with a 12Gi guarantee b2 goes."""
    beta = [
        pod("b1", "beta", admitted_at=1),
        pod("b2", "beta", admitted_at=2, borrowed_gib=12, memory="24Gi"),
    ]
    alpha = [pod("a0", "alpha", admitted_at=3), pod("a1", "alpha", submitted=50)]
    leases = [lease(p) for p in (*beta, alpha[0])]
    plan = reclaim_round([*beta, *alpha], leases, quotas(24), NOW)
    assert plan.notices == ()
    assert names(plan.stuck) == ["a1"]
    assert "without taking anyone below guaranteed" in plan.stuck[0].reason
    plan = reclaim_round([*beta, *alpha], leases, quotas(12), NOW)
    assert names(plan.notices) == ["b2"]


def test_pods_within_the_borrowers_nominal_quota_are_never_taken() -> None:
    beta = beta_pods()
    many = [pod(f"a{i}", "alpha", submitted=50 + i) for i in range(1, 5)]
    plan = reclaim_round([*beta, *many], [lease(p) for p in beta], quotas(0), NOW)
    assert names(plan.notices) == ["b3", "b4"]


def test_exclusive_pods_are_never_taken() -> None:
    beta = beta_pods(b4={"exclusive": True})
    plan = reclaim_round(
        [*beta, pod("a1", "alpha", submitted=50)], [lease(p) for p in beta], quotas(), NOW
    )
    assert names(plan.notices) == ["b3"]


def test_borrowed_mark_comes_from_the_lease_when_the_pod_has_one() -> None:
    beta = beta_pods()
    by_name = {p.name: p for p in beta}
    leases = [lease(by_name["b1"]), lease(by_name["b2"]), lease(by_name["b3"])]
    leases.append(lease(by_name["b4"], borrowed_gib=0))  # b4's lease says: not borrowed
    plan = reclaim_round([*beta, pod("a1", "alpha", submitted=50)], leases, quotas(), NOW)
    assert names(plan.notices) == ["b3"]
    # without any lease (not bound yet) the admitted annotation marks the borrowed pods
    plan = reclaim_round([*beta, pod("a1", "alpha", submitted=50)], [], quotas(), NOW)
    assert names(plan.notices) == ["b4"]


def test_notice_is_withdrawn_when_nobody_waits_any_more() -> None:
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    beta = beta_pods(b4={"notice": notice})
    plan = reclaim_round(beta, [lease(p) for p in beta], quotas(), NOW + 5)
    assert names(plan.withdrawals) == ["b4"] and plan.evictions == ()


def test_notice_annotation_round_trips_and_patches_test_the_uid() -> None:
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", blocked="PDB says no")
    text = notice_annotation(notice)
    assert json.loads(text)["evictAt"] == format_time(NOW + 3)
    assert parse_notice(text) == notice
    assert parse_notice("{not json") is None
    assert parse_notice('{"at": "x"}') is None
    annotated = read_pod({"metadata": {"uid": "uid-1", "annotations": {"x": "y"}}})
    patch = annotate_patch(annotated, {RECLAIM_ANN: text})
    assert patch[0] == {"op": "test", "path": "/metadata/uid", "value": "uid-1"}
    assert patch[1]["path"] == "/metadata/annotations/gpupool.io~1reclaim-notice"
    bare = annotate_patch(read_pod({"metadata": {"uid": "uid-1"}}), {RECLAIM_ANN: text})
    assert bare[1]["value"] == {"gpupool.io/reclaim-notice": text}
    assert annotate_patch(annotated, {RECLAIM_ANN: None})[1] == {
        "op": "remove",
        "path": "/metadata/annotations/gpupool.io~1reclaim-notice",
    }


def test_lease_mark_and_admitted_annotation_are_read() -> None:
    spec = {"tenant": "beta", "node": "n1", "devices": [],
            "podRef": {"namespace": "ns", "name": "p", "uid": "u"}}  # fmt: skip
    obj = {"metadata": {"name": "u", "namespace": "ns"}, "status": {"phase": "Released"},
           "spec": {**spec, "borrowed": 5, "preemptible": True}}  # fmt: skip
    ended = lease_from_json(obj)
    assert (ended.pod.uid, ended.borrowed, ended.preemptible) == ("u", 5, True)
    assert not ended.holds_capacity
    assert lease_from_json({"metadata": {"name": "u"}, "spec": spec}).holds_capacity
    read = read_admitted({"gpupool.io/admitted": admitted(1, 12)})
    assert read == Admitted(parse_time(at(1)) or -1.0, 12 * GiB)
    assert read_admitted({"gpupool.io/admitted": "{bad"}) == Admitted(0.0)
    assert read_admitted(None) == Admitted(0.0)
