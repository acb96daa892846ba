"""`onExhaustion: drain`, the pure plan: for given pods, budget standings and clock, which pods
get a drain notice, which are evicted after their grace, which notices are withdrawn; a pod
being deleted (evicted already) is never evicted again, and a new window stops the drain."""

from __future__ import annotations

from typing import Any

from fake_cluster import lease_json, pod_json

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.reclaim_notice import notice_annotation
from gpupool.controllers.admission.plan import plan_admission
from gpupool.controllers.budget.drain import DrainPlan, plan_drain
from gpupool.controllers.budget.plan import plan_budgets
from gpupool.domain.units import GiB
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota
from gpupool.state.notice import ReclaimNotice

WINDOW = 120.0
T0 = 1_767_225_600.0  # a window boundary (a multiple of 120 s)
GRACE = {"alpha": 5.0}


def quota(on: OnExhaustion = OnExhaustion.DRAIN, limit: float = 0.1) -> TenantQuota:
    return TenantQuota("alpha", nominal=100 * GiB, budget=Budget(limit, WINDOW, on))


def _running(name: str, notice: ReclaimNotice | None = None, **meta: Any) -> Any:
    notes = {} if notice is None else {"gpupool.io/drain-notice": notice_annotation(notice)}
    pod = pod_json(name, "alpha", 12, admitted_at=T0, node="n1", phase="Running",
                   annotations=notes)  # fmt: skip
    pod["metadata"].update(meta)
    return pod


def _plan(pods: list[Any], now: float, q: TenantQuota | None = None) -> DrainPlan:
    """The budget standings from the pods' leases (each 12Gi since T0), then the drain plan."""
    leases = [lease_from_json(lease_json(p, phase="Active", start=T0)) for p in pods]
    statuses = plan_budgets([q or quota()], leases, now).statuses
    return plan_drain([read_pod(p) for p in pods], statuses, GRACE, now)


def test_nothing_is_drained_while_the_budget_lasts() -> None:
    # two 12Gi pods burn 24 GiB-hours an hour: 0.1 GiB-hours last 15 s
    assert _plan([_running("a"), _running("b")], T0 + 14) == DrainPlan()


def test_a_spent_drain_budget_notices_every_running_pod_with_its_tenants_grace() -> None:
    plan = _plan([_running("a"), _running("b")], T0 + 20)
    assert [(n.pod.name, n.notice.at, n.notice.evict_at) for n in plan.notices] == [
        ("a", T0 + 20, T0 + 25),
        ("b", T0 + 20, T0 + 25),
    ]
    first = plan.notices[0]
    assert (first.notice.claimant, first.notice.claimant_pod) == ("alpha", "ns/a")
    assert "(on exhaustion: drain)" in first.message and "grace period 5s" in first.message
    assert plan.evictions == () and plan.withdrawals == ()


def test_block_and_preemptible_budgets_never_drain() -> None:
    for on in (OnExhaustion.BLOCK, OnExhaustion.PREEMPTIBLE):
        assert _plan([_running("a")], T0 + 60, quota(on)) == DrainPlan()


def test_a_noticed_pod_is_evicted_once_its_grace_is_over_and_never_twice() -> None:
    # one 12Gi pod spends 0.1 GiB-hours in 30 s
    notice = ReclaimNotice(T0 + 30, T0 + 35, "alpha", "ns/a")
    assert _plan([_running("a", notice)], T0 + 34) == DrainPlan()  # in its grace period
    (eviction,) = _plan([_running("a", notice)], T0 + 35).evictions
    assert eviction.pod.key == "ns/a" and eviction.notice == notice
    assert "evicted:" in eviction.message and "(on exhaustion: drain)" in eviction.message
    # evicted: the pod terminates (deletionTimestamp) while its lease still counts: no second one
    deleting = _running("a", notice, deletionTimestamp="2026-01-01T00:00:36Z")
    assert _plan([deleting], T0 + 40) == DrainPlan()


def test_pods_holding_no_card_are_not_noticed() -> None:
    gated = pod_json("gated", "alpha", 12, gated=True)
    finished = pod_json("done", "alpha", 12, admitted_at=T0, node="n1", phase="Succeeded")
    unbound = pod_json("unbound", "alpha", 12, admitted_at=T0)
    statuses = plan_budgets(
        [quota()], [lease_from_json(lease_json(_running("a"), phase="Active", start=T0))], T0 + 60
    ).statuses
    assert statuses["alpha"].exhausted
    views = [read_pod(p) for p in (gated, finished, unbound)]
    assert plan_drain(views, statuses, GRACE, T0 + 60) == DrainPlan()


def test_a_new_window_withdraws_the_notices_and_the_pods_keep_running() -> None:
    notice = ReclaimNotice(T0 + 20, T0 + 25, "alpha", "ns/a")
    # at T0 + 121 the new window has 1 s of use of each pod: 0.0067 of 0.1 GiB-hours
    plan = _plan([_running("a", notice)], T0 + WINDOW + 1)
    assert plan.notices == () and plan.evictions == ()
    (withdrawal,) = plan.withdrawals
    assert withdrawal.pod.key == "ns/a" and "a new budget window began" in withdrawal.message


def test_a_raised_limit_withdraws_the_notice_too() -> None:
    notice = ReclaimNotice(T0 + 20, T0 + 25, "alpha", "ns/a")
    (withdrawal,) = _plan([_running("a", notice)], T0 + 40, quota(limit=100)).withdrawals
    assert "no longer spent" in withdrawal.message


def test_a_notice_of_a_past_window_is_given_afresh_when_the_new_window_is_spent_too() -> None:
    notice = ReclaimNotice(T0 + 20, T0 + 25, "alpha", "ns/a")
    now = T0 + WINDOW + 40  # 40 s of 12Gi: 0.13 GiB-hours, spent again
    plan = _plan([_running("a", notice)], now)
    assert plan.evictions == ()
    (fresh,) = plan.notices
    assert (fresh.notice.at, fresh.notice.evict_at) == (now, now + 5)


def test_new_pods_of_a_draining_tenant_wait_for_the_next_window() -> None:
    running = _running("a")
    new = pod_json("new", "alpha", 12, gated=True, created=T0 + 30)
    leases = [lease_from_json(lease_json(running, phase="Active", start=T0))]
    budgets = plan_budgets([quota()], leases, T0 + 60)
    plan = plan_admission([read_pod(running), read_pod(new)], [quota()], T0 + 60,
                          default_tenant="default", meter=budgets.meter)  # fmt: skip
    assert plan.admit == ()
    (queued,) = plan.queued
    assert queued.reason == "BUDGET_EXHAUSTED" and "(on exhaustion: drain)" in queued.detail
