"""Budgets in the controller's plans: for given GpuLeases and clock, the budget standing and the
admission decisions (block waits with its reason until the next window, preemptible admits as
preemptible), and an ended lease kept until its window no longer counts it."""

from __future__ import annotations

import pytest
from fake_cluster import lease_json, pod_json

from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.names import DEFAULT_TENANT
from gpupool.controllers.admission.plan import plan_admission
from gpupool.controllers.budget.plan import accounting, plan_budgets
from gpupool.controllers.kept import Kept
from gpupool.controllers.leases.plan import plan_leases
from gpupool.domain.units import GiB
from gpupool.quota.lease import Lease
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

WINDOW = 120.0
T0 = 1_767_225_600.0  # a window boundary (a multiple of 120 s)


def quota(on: OnExhaustion = OnExhaustion.BLOCK, limit: float = 0.1) -> TenantQuota:
    return TenantQuota("alpha", nominal=100 * GiB, budget=Budget(limit, WINDOW, on))


DONE = pod_json("done", "alpha", 12, phase="Succeeded")
RUNNING = pod_json("run", "alpha", 12, admitted_at=T0 + 10, node="n1", phase="Running")
LEASES = [
    lease_from_json(lease_json(DONE, phase="Released", start=T0, end=T0 + 20)),
    lease_from_json(lease_json(RUNNING, phase="Active", start=T0 + 10)),
]
NEW = pod_json("new", "alpha", 12, gated=True, created=T0 + 30)


def test_the_status_counts_ended_and_running_leases_of_the_window() -> None:
    plan = plan_budgets([quota()], LEASES, T0 + 40)
    status = plan.statuses["alpha"]
    assert status.used == pytest.approx(12 * 20 / 3600 + 12 * 30 / 3600)
    assert (status.window_start, status.window_end) == (T0, T0 + WINDOW)
    assert status.rate == pytest.approx(12.0)
    assert status.unit == "GiB-hours"


def _admission(q: TenantQuota, now: float) -> tuple[list[str], list[tuple[str, str, str]]]:
    budgets = plan_budgets([q], LEASES, now)
    pods = [read_pod(p) for p in (DONE, RUNNING, NEW)]
    plan = plan_admission(pods, [q], now, default_tenant=DEFAULT_TENANT, meter=budgets.meter)
    admitted = [f"{a.pod.name}:{'preemptible' if a.preemptible else 'plain'}" for a in plan.admit]
    return admitted, [(w.pod.name, w.reason, w.detail) for w in plan.queued]


def test_a_spent_block_budget_keeps_a_new_pod_waiting_with_its_reason() -> None:
    admitted, queued = _admission(quota(limit=0.1), T0 + 40)  # 0.18 GiB-hours used
    assert admitted == []
    [(name, reason, detail)] = queued
    assert name == "new" and reason == "BUDGET_EXHAUSTED"
    assert "of 0.1 GiB-hours this window" in detail and "starts in 80s" in detail


def test_the_next_window_admits_it() -> None:
    # the running lease's 12 GiB from T0+120 on: 0.0033 GiB-hours at T0+121, under 0.1
    admitted, queued = _admission(quota(limit=0.1), T0 + WINDOW + 1)
    assert admitted == ["new:plain"] and queued == []


def test_a_spent_preemptible_budget_admits_as_preemptible() -> None:
    admitted, _ = _admission(quota(OnExhaustion.PREEMPTIBLE, limit=0.1), T0 + 40)
    assert admitted == ["new:preemptible"]


def test_an_ended_lease_is_kept_until_its_budget_window_is_over() -> None:
    ended = [LEASES[0]]
    budgets = {"alpha": Budget(0.1, WINDOW)}
    late = T0 + 100  # past the retention (10 s), inside the window its hours count in
    assert plan_leases(ended, {}, late, retention_s=10, budgets=budgets).collect == ()
    assert len(plan_leases(ended, {}, late, retention_s=10).collect) == 1  # no budget: collected
    over = plan_leases(ended, {}, T0 + WINDOW, retention_s=10, budgets=budgets)
    assert [c.lease.name for c in over.collect] == ["uid-done"]


def test_clashing_quotas_give_no_meter() -> None:
    assert plan_budgets([quota(), quota()], LEASES, T0).meter is None


def test_live_idle_lending_counts_the_lenders_ended_gpuleases() -> None:
    """The controller's meter remembers the lender's GpuLease that ended 10 s ago: with a
    300 s idle time its quota is not lent yet; with none, the borrower borrows at once."""
    lender_pod = pod_json("l1", "lender", 24, phase="Succeeded")
    ended = lease_from_json(lease_json(lender_pod, phase="Released", start=T0, end=T0 + 20, gib=24))
    borrower = [
        read_pod(pod_json("b1", "borrower", 12, admitted_at=T0, node="n1", phase="Running")),
        read_pod(pod_json("b2", "borrower", 12, gated=True, created=T0 + 25)),
    ]

    def waits(idle_s: float) -> list[str]:
        quotas = [
            TenantQuota("lender", 24 * GiB, cohort="c", lend_after_idle_s=idle_s),
            TenantQuota("borrower", 12 * GiB, cohort="c"),
        ]
        meter = plan_budgets(quotas, [ended], T0 + 30).meter
        plan = plan_admission(borrower, quotas, T0 + 30, default_tenant=DEFAULT_TENANT, meter=meter)
        return [w.reason for w in plan.queued]

    assert waits(300.0) == ["LENDER_NOT_IDLE"]
    assert waits(0.0) == []


def test_kept_accounts_meter_as_fresh_ones_round_after_round() -> None:
    """The core leases kept between rounds give the same standing as those made afresh, as
    `now` moves on; a lease whose start is still ahead is clamped each round, not kept."""
    ahead = lease_from_json(lease_json(pod_json("soon", "alpha", 12), start=T0 + 200))
    leases = [*LEASES, ahead]
    kept: Kept[Lease] = Kept()
    for now in (T0 + 40, T0 + 90, T0 + 150, T0 + 260):
        by_kept = plan_budgets([quota()], leases, now, kept)
        fresh = plan_budgets([quota()], leases, now)
        assert by_kept.statuses == fresh.statuses, now
    assert accounting(LEASES[1], T0 + 300, kept) is accounting(LEASES[1], T0 + 400, kept)
    changed = lease_from_json(lease_json(RUNNING, phase="Active", start=T0 + 10))
    assert accounting(changed, T0 + 400, kept) is not accounting(LEASES[1], T0 + 400, kept)


def test_the_meter_counts_only_tenants_that_read_it_and_reads_the_same_for_them() -> None:
    """Admission reads the meter for a budget's window and for quota lent once idle; the leases
    of any other tenant are left out of it, and what it says of the others does not change."""
    from gpupool.quota.book import QuotaBook
    from gpupool.quota.metering import Meter

    quotas = [
        quota(),  # alpha: a budget
        TenantQuota("beta", nominal=50 * GiB, cohort="c", lend_after_idle_s=60.0),
        TenantQuota("gamma", nominal=50 * GiB, cohort="c"),  # reads nothing of the meter
    ]
    leases = []
    for i, tenant in enumerate(["alpha", "beta", "gamma"] * 3):
        pod = pod_json(f"p{i}", tenant, 4 + i, node="n1", phase="Running", admitted_at=T0 + i)
        ended = i % 2 == 0
        leases.append(lease_from_json(lease_json(
            pod, phase="Released" if ended else "Active", start=T0 + i,
            **({"end": T0 + 30 + i} if ended else {}),
        )))  # fmt: skip
    now = T0 + 50
    plan = plan_budgets(quotas, leases, now)
    everything = Meter.snapshot(QuotaBook(quotas), [x.accounting(now) for x in leases], now)
    assert plan.meter is not None
    assert plan.meter.usage("gamma", now).leases == 0  # not metered
    assert everything.usage("gamma", now).leases == 3
    core = [x.accounting(now) for x in leases]
    for tenant in ("alpha", "beta"):
        mine = [x for x in core if x.tenant == tenant]
        assert plan.meter.usage(tenant, now) == everything.usage(tenant, now)
        assert plan.meter.window_usage(tenant, now, mine) == everything.window_usage(
            tenant, now, mine
        )
        assert plan.meter.idle_peak(tenant, now, mine) == everything.idle_peak(tenant, now, mine)
