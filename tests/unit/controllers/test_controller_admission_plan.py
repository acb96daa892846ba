"""The admission queue's pure decision over a snapshot of pods and quotas."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.pod_patches import admit_patch
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.admitted import Admitted, admitted_annotation
from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.controllers.admission.charge import mark_borrowed
from gpupool.controllers.admission.plan import AdmissionPlan, plan_admission
from gpupool.controllers.admission.reconcile import admitted_record, quota_status
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.queue import FifoMode
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.pods import PodView


def decide(pods: Any, quotas: Any, now: float, **kw: Any) -> AdmissionPlan:
    return plan_admission(pods, quotas, now, default_tenant=DEFAULT_TENANT, **kw)


def pod_json(
    name: str,
    *,
    tenant: str = "alpha",
    memory: str = "12Gi",
    priority: int = 0,
    queued_at: str = "2026-01-01T00:00:00.000000Z",
    gated: bool = True,
    admitted: str | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    annotations = {"gpupool.io/queued-at": queued_at}
    if admitted is not None:
        annotations["gpupool.io/admitted"] = admitted
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"gpupool.io/tenant": tenant},
            "annotations": annotations,
        },
        "spec": {
            "priority": priority,
            "schedulingGates": [{"name": "gpupool.io/quota"}] if gated else [],
            "containers": [
                {"name": "main", "resources": {"limits": {"gpupool.io/gpu-memory": memory}}}
            ],
        },
        "status": {"phase": phase},
    }


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000000Z"


def names(items: Any) -> list[str]:
    return [i.pod.name for i in items]


def test_time_round_trips() -> None:
    stamp = "2026-01-02T03:04:05.123456Z"
    epoch = parse_time(stamp)
    assert epoch is not None and format_time(epoch) == stamp
    assert parse_time("garbage") is None


def test_admits_within_nominal_then_queues_in_priority_then_fifo_order() -> None:
    quota = TenantQuota("alpha", nominal=24 * GiB)
    pods = [
        read_pod(pod_json("run", gated=False, admitted=admitted_annotation(Admitted(0.0), "x"))),
        read_pod(pod_json("first", queued_at=at(1))),
        read_pod(pod_json("second", queued_at=at(2))),
        read_pod(pod_json("late-urgent", queued_at=at(3), priority=100)),
    ]
    plan = decide(pods, [quota], now=10.0)
    # 12Gi held; the urgent pod goes first, into the remaining 12Gi
    assert names(plan.admit) == ["late-urgent"]
    assert names(plan.queued) == ["first", "second"]
    assert [q.position for q in plan.queued] == [1, 2]
    assert plan.queued[0].reason == "NO_COHORT"
    assert "24Gi of its 24Gi nominal quota" in plan.queued[0].note
    assert plan.queued[1].note.startswith("position 2 of 2 in the queue of tenant alpha: ")
    (status,) = [t for t in plan.tenants if t.tenant == "alpha"]
    assert (status.used, status.pods, len(status.queue)) == (24 * GiB, 2, 2)


def test_finished_pods_free_their_quota() -> None:
    quota = TenantQuota("alpha", nominal=12 * GiB)
    done = pod_json("done", gated=False, admitted=admitted_annotation(Admitted(0.0), "x"))
    done["status"]["phase"] = "Succeeded"
    plan = decide([read_pod(done), read_pod(pod_json("next"))], [quota], now=1.0)
    assert names(plan.admit) == ["next"]


def test_strict_fifo_holds_back_smaller_pods_behind_the_head() -> None:
    quota = TenantQuota("alpha", nominal=20 * GiB)
    pods = [
        read_pod(pod_json("big", memory="30Gi", queued_at=at(1))),
        read_pod(pod_json("small", memory="1Gi", queued_at=at(2))),
    ]
    # 30Gi can never fit 20Gi: rejected, but strict FIFO still holds the queue behind it
    strict = decide(pods, [quota], now=5.0, mode=FifoMode.STRICT)
    assert strict.admit == ()
    assert {q.pod.name: q.reason for q in strict.queued} == {
        "big": "REJECTED",
        "small": "QUEUE_ORDER",
    }
    best = decide(pods, [quota], now=5.0, mode=FifoMode.BEST_EFFORT)
    assert names(best.admit) == ["small"]
    assert "can never be admitted" in best.queued[0].detail


def test_default_tenant_is_unlimited_and_unknown_tenants_wait_for_a_quota() -> None:
    pods = [
        read_pod(pod_json("free", tenant="default", memory="80Gi")),
        read_pod(pod_json("orphan", tenant="nobody")),
    ]
    plan = decide(pods, [], now=1.0)
    assert names(plan.admit) == ["free"]
    assert plan.queued[0].reason == "NO_QUOTA"
    assert "has no GpuQuota" in plan.queued[0].detail
    limited = decide(
        pods[:1], [TenantQuota("default", nominal=40 * GiB)], now=1.0
    )  # a GpuQuota named default limits it
    assert limited.admit == () and limited.queued[0].reason == "REJECTED"


def test_borrowing_is_recorded_and_counted() -> None:
    quotas = [
        TenantQuota("alpha", nominal=12 * GiB, cohort="c"),
        TenantQuota("beta", nominal=24 * GiB, cohort="c"),
    ]
    pods = [
        read_pod(pod_json("a1", queued_at=at(1))),
        read_pod(pod_json("a2", queued_at=at(2))),
    ]
    plan = decide(pods, quotas, now=1.0)
    assert [(a.pod.name, a.borrowed) for a in plan.admit] == [("a1", 0), ("a2", 12 * GiB)]
    (alpha,) = [t for t in plan.tenants if t.tenant == "alpha"]
    assert alpha.borrowed == 12 * GiB


def test_admit_patch_tests_the_uid_and_gate_before_removing_it() -> None:
    raw = pod_json("p")
    raw["metadata"]["annotations"]["gpupool.io/queue"] = "position 1 of 1"
    view = read_pod(raw)
    plan = decide([view], [TenantQuota("alpha", nominal=GiB * 100)], now=7.0)
    patch = admit_patch(plan.admit[0].pod, admitted_record(plan.admit[0], 7.0))
    assert patch[0] == {"op": "test", "path": "/metadata/uid", "value": "uid-p"}
    assert patch[1]["op"] == "test" and patch[2] == {
        "op": "remove",
        "path": "/spec/schedulingGates/0",
    }
    ops = {(p["op"], p["path"]) for p in patch}
    assert ("remove", "/metadata/annotations/gpupool.io~1queue") in ops
    assert ("add", "/metadata/annotations/gpupool.io~1admitted") in ops


def test_quota_status_lists_the_queue_head() -> None:
    quota = TenantQuota("alpha", nominal=12 * GiB)
    pods = [read_pod(pod_json(f"p{i}", queued_at=at(i))) for i in range(3)]
    plan = decide(pods, [quota], now=1.0)
    (tenant,) = [t for t in plan.tenants if t.tenant == "alpha"]
    status = quota_status(tenant, 4)
    assert status.used == "12Gi" and status.queued == 2 and status.observed_generation == 4
    assert [q.name for q in status.queue] == ["p1", "p2"]


def test_unreadable_gated_pod_waits_with_its_problem() -> None:
    view = read_pod(pod_json("bad", memory="-1"))
    assert isinstance(view, PodView) and view.problem is not None
    plan = decide([view], [TenantQuota("alpha", nominal=GiB)], now=1.0)
    assert plan.admit == () and plan.queued[0].reason == "UNREADABLE"


def test_gpu_unit_quota_records_amount_and_borrowed_in_milli_gpu() -> None:
    from gpupool.adapters.wire.admitted import read_admitted
    from gpupool.quota.resource import Resource

    def whole_gpu_pod(name: str, second: int) -> dict[str, Any]:
        raw = pod_json(name, queued_at=at(second))
        raw["spec"]["containers"][0]["resources"]["limits"] = {"gpupool.io/gpu": "1"}
        return raw

    quotas = [
        TenantQuota("alpha", nominal=1000, resource=Resource.GPU, cohort="c"),
        TenantQuota("beta", nominal=2000, resource=Resource.GPU, cohort="c"),
    ]
    raws = [whole_gpu_pod("a1", 1), whole_gpu_pod("a2", 2)]
    plan = decide([read_pod(r) for r in raws], quotas, now=1.0)
    assert [(a.pod.name, a.resource, a.amount, a.borrowed) for a in plan.admit] == [
        ("a1", "gpu", 1000, 0),
        ("a2", "gpu", 1000, 1000),
    ]
    # What the extender's bind reads back from the admit patch: both amounts in milli-GPU.
    patch = admit_patch(plan.admit[1].pod, admitted_record(plan.admit[1], 1.0))
    (record,) = [p["value"] for p in patch if p["path"].endswith("gpupool.io~1admitted")]
    assert read_admitted({"gpupool.io/admitted": record}) == Admitted(1.0, 1000, False, "gpu", 1000)


def test_admitted_record_without_or_with_a_bad_resource_means_bytes() -> None:
    from gpupool.adapters.wire.admitted import read_admitted

    old = admitted_annotation(Admitted(0.0, borrowed=5), "x")
    assert read_admitted({"gpupool.io/admitted": old}).resource is None
    odd = '{"borrowed": 5, "resource": "cpu", "amount": 7}'
    mark = read_admitted({"gpupool.io/admitted": odd})
    assert (mark.borrowed, mark.resource, mark.amount) == (5, None, None)


def gpu_pod(name: str, limits: dict[str, str], *, tenant: str = "default") -> PodView:
    obj = pod_json(name, tenant=tenant)
    obj["spec"]["containers"][0]["resources"]["limits"] = limits
    return read_pod(obj)


A100_CARDS = {"A100-80GB": 72 * GiB}  # what the cluster's cards offer slices


def test_whole_gpu_and_compute_only_pods_of_the_default_tenant_are_admitted() -> None:
    pods = [
        gpu_pod("one", {"gpupool.io/gpu": "1"}),
        gpu_pod("nine", {"gpupool.io/gpu": "9"}),
        gpu_pod("compute", {"gpupool.io/gpu-compute": "30"}),
    ]
    for sizes in (A100_CARDS, {}):  # known cards, or none reported yet: unlimited either way
        plan = decide(pods, [], now=1.0, card_sizes=sizes)
        assert sorted(names(plan.admit)) == ["compute", "nine", "one"], plan.queued
        for admit in plan.admit:
            assert admit.reason == "tenant 'default' has no GpuQuota, so it is not limited"
            assert "nominal" not in admit.reason


def test_a_memory_quota_counts_a_whole_gpu_as_the_largest_card_it_may_take() -> None:
    quota = TenantQuota("alpha", nominal=100 * GiB)
    pods = [
        gpu_pod("one", {"gpupool.io/gpu": "1"}, tenant="alpha"),
        gpu_pod("two", {"gpupool.io/gpu": "1"}, tenant="alpha"),
    ]
    plan = decide(pods, [quota], now=1.0, card_sizes={**A100_CARDS, "T4": 14 * GiB})
    assert names(plan.admit) == ["one"]
    assert plan.admit[0].amount == 72 * GiB
    assert plan.admit[0].reason == "within nominal quota (72Gi of 100Gi)"
    assert names(plan.queued) == ["two"]
    assert "100Gi" in plan.queued[0].detail  # the tenant's real quota, in bytes


def test_a_whole_gpu_of_a_limited_tenant_waits_while_no_card_is_known_and_says_why() -> None:
    quota = TenantQuota("alpha", nominal=100 * GiB)
    plan = decide([gpu_pod("one", {"gpupool.io/gpu": "1"}, tenant="alpha")], [quota], now=1.0)
    assert plan.admit == ()
    assert "1 whole GPU(s)" in plan.queued[0].detail
    assert "no card it may use is known yet" in plan.queued[0].detail


def test_eight_slices_of_one_gib_are_charged_eight_gib_and_fit_a_24gib_quota() -> None:
    quota = TenantQuota("alpha", nominal=24 * GiB)
    pod = gpu_pod("eight", {"gpupool.io/gpu": "8", "gpupool.io/gpu-memory": "1Gi"}, tenant="alpha")
    plan = decide([pod], [quota], now=1.0, card_sizes=A100_CARDS)
    assert names(plan.admit) == ["eight"] and plan.admit[0].amount == 8 * GiB
    # eight whole cards are 576Gi: over the quota, so that pod waits
    whole = gpu_pod("whole", {"gpupool.io/gpu": "8"}, tenant="alpha")
    waits = decide([whole], [quota], now=1.0, card_sizes=A100_CARDS)
    assert waits.admit == () and names(waits.queued) == ["whole"]


def test_a_milli_quota_counts_bytes_against_the_smallest_card_that_takes_them() -> None:
    quota = TenantQuota("alpha", nominal=2000, resource=Resource.GPU)
    pod = gpu_pod("p", {"gpupool.io/gpu-memory": "12Gi"}, tenant="alpha")
    sizes = {**A100_CARDS, "T4": 14 * GiB, "RTX-3060": 10 * GiB}  # 10Gi cannot take 12Gi
    plan = decide([pod], [quota], now=1.0, card_sizes=sizes)
    assert plan.admit[0].amount == 858  # 12Gi of a 14Gi card, not 167m of a 72Gi one


def test_a_bound_pod_counts_what_its_lease_holds() -> None:
    quota = TenantQuota("alpha", nominal=100 * GiB)
    mark = admitted_annotation(Admitted(0.0, resource="gpu-memory", amount=72 * GiB), "x")
    obj = pod_json("bound", gated=False, admitted=mark)
    obj["spec"]["containers"][0]["resources"]["limits"] = {"gpupool.io/gpu": "1"}
    bound = read_pod(obj)
    ref = PodRef("ns", "bound", "uid-bound")
    card = Slice(0, "GPU-0", "T4", 0, 14 * GiB, 1000)
    lease = LeaseRecord("uid-bound", "ns", "alpha", ref, "n", (card,), amount=14 * GiB)
    before = decide([bound], [quota], now=1.0, card_sizes=A100_CARDS)
    assert before.tenants[0].used == 72 * GiB  # the most it may take, while unbound
    after = decide(mark_borrowed([bound], [lease]), [quota], now=1.0, card_sizes=A100_CARDS)
    assert after.tenants[0].used == 14 * GiB  # what its lease holds
