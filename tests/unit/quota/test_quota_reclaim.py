from __future__ import annotations

from quota_builders import G, lease, ledger_of, tenant

from gpupool.quota.reclaim import NoReclaim, ReclaimPlan, due, plan_reclaim


def test_victims_from_biggest_borrower_lowest_priority_newest_first() -> None:
    ledger = ledger_of(
        tenant("lender", 20 * G),
        tenant("big", 4 * G, reclaim_grace_s=60.0),
        tenant("small", 4 * G),
    )
    ledger.add(lease("big", 4 * G, at=0))
    ledger.add(lease("small", 4 * G, at=0))
    b_old = lease("big", 3 * G, at=1, borrowed=True)
    b_new = lease("big", 3 * G, at=2, borrowed=True)
    b_high = lease("big", 3 * G, at=3, borrowed=True, priority=5)
    s_new = lease("small", 3 * G, at=4, borrowed=True)
    for le in (b_old, b_new, b_high, s_new):
        ledger.add(le)
    plan = plan_reclaim(ledger, "lender", 3 * G, now=100.0)
    assert isinstance(plan, ReclaimPlan)
    assert [n.lease_id for n in plan.notices] == [b_new.id]
    assert plan.notices[0].evict_at == 160.0
    assert due(plan.notices, 159.0) == []
    assert [e.lease_id for e in due(plan.notices, 160.0)] == [b_new.id]


def test_pruning_keeps_only_needed_victims() -> None:
    ledger = ledger_of(tenant("lender", 20 * G), tenant("borrower", 0))
    small_new = lease("borrower", 1 * G, at=9, borrowed=True)
    big_old = lease("borrower", 8 * G, at=1, borrowed=True)
    ledger.add(big_old)
    ledger.add(small_new)
    plan = plan_reclaim(ledger, "lender", 5 * G, now=10.0)
    assert isinstance(plan, ReclaimPlan)
    # newest first picks the 1G lease, then the 8G one; the 1G one is then not needed
    assert [n.lease_id for n in plan.notices] == [big_old.id]
    assert plan.freed >= 5 * G


def test_never_below_guaranteed_and_never_unborrowed() -> None:
    ledger = ledger_of(tenant("lender", 10 * G), tenant("b", 6 * G, guaranteed=6 * G))
    ledger.add(lease("b", 2 * G))  # plain
    ledger.add(lease("b", 6 * G, borrowed=True))  # used 8 > nominal 6
    plan = plan_reclaim(ledger, "lender", 1 * G, now=0.0)
    assert isinstance(plan, NoReclaim)  # evicting the 6G lease would leave b at 2G < 6G guaranteed
    assert "below guaranteed" in plan.reason


def test_pending_notices_count_first() -> None:
    ledger = ledger_of(tenant("lender", 10 * G), tenant("b", 0))
    first = lease("b", 4 * G, borrowed=True, at=1)
    second = lease("b", 4 * G, borrowed=True, at=2)
    ledger.add(first)
    ledger.add(second)
    plan = plan_reclaim(ledger, "lender", 3 * G, now=0.0, pending={second.id})
    assert isinstance(plan, ReclaimPlan) and plan.notices == ()
    plan = plan_reclaim(ledger, "lender", 6 * G, now=0.0, pending={second.id})
    assert isinstance(plan, ReclaimPlan)
    assert [n.lease_id for n in plan.notices] == [first.id]


def test_no_cohort_no_reclaim() -> None:
    from gpupool.quota.spec import TenantQuota

    ledger = ledger_of(TenantQuota(name="solo", nominal=G))
    assert isinstance(plan_reclaim(ledger, "solo", 1, 0.0), NoReclaim)


def test_work_admitted_as_preemptible_is_taken_before_borrowed_work() -> None:
    # "spent" ran out of budget, so its newest pod was admitted preemptible; "big" borrows more
    ledger = ledger_of(tenant("lender", 20 * G), tenant("big", 2 * G), tenant("spent", 2 * G))
    ledger.add(lease("big", 2 * G, at=0))
    ledger.add(lease("spent", 2 * G, at=0))
    borrowed = lease("big", 6 * G, at=5, borrowed=True)
    preemptible = lease("spent", 3 * G, at=1, borrowed=True, preemptible=True)
    ledger.add(borrowed)
    ledger.add(preemptible)
    plan = plan_reclaim(ledger, "lender", 3 * G, now=10.0)
    assert isinstance(plan, ReclaimPlan)
    assert [n.lease_id for n in plan.notices] == [preemptible.id]
