from __future__ import annotations

import pytest
from quota_builders import G, lease, ledger_of, tenant

from gpupool.quota.admission import Admit, Ask, Reject, Wait, WaitReason, decide
from gpupool.quota.metering import Meter
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

# a: nominal 10G, borrows at most 6G; b: nominal 10G, lends at most 8G; c: no cohort
QUOTAS = (
    tenant("a", 10 * G, borrow_limit=6 * G),
    tenant("b", 10 * G, lend_limit=8 * G),
    TenantQuota(name="c", nominal=4 * G, max_pods=2, compute_limit_milli=1500),
)


@pytest.mark.parametrize(
    ("held", "ask", "expected", "detail"),
    [
        ({}, Ask("a", 4 * G), "admit", "within nominal"),
        ({"a": 8 * G}, Ask("a", 4 * G), "admit", "borrows 2Gi"),
        ({"a": 10 * G}, Ask("a", 6 * G), "admit", "borrows 6Gi"),
        ({"a": 10 * G}, Ask("a", 7 * G), WaitReason.BORROW_LIMIT, "over its borrow limit of 6Gi"),
        ({"a": 10 * G}, Ask("a", 2 * G, exclusive=True), WaitReason.OVER_NOMINAL_EXCLUSIVE, ""),
        ({"a": 10 * G, "b": 7 * G}, Ask("a", 4 * G), WaitReason.COHORT_EXHAUSTED, "3Gi unused"),
        ({"b": 10 * G}, Ask("b", 1 * G), "admit", "borrows 1Gi"),  # a's unused quota
        ({"a": 10 * G, "b": 10 * G}, Ask("b", 1 * G), WaitReason.COHORT_EXHAUSTED, "0 unused"),
        ({"a": 15 * G}, Ask("b", 6 * G), WaitReason.RECLAIM_NEEDED, "hold 1Gi"),
        ({"c": 4 * G}, Ask("c", 1), WaitReason.NO_COHORT, ""),
        ({}, Ask("a", 17 * G), "reject", "all it could borrow is 16Gi"),
        ({}, Ask("a", 11 * G, exclusive=True), "reject", "exclusive pods never borrow"),
        ({}, Ask("nobody", 1), "reject", "has no quota"),
        ({}, Ask("c", 1, compute_milli=2000), "reject", "compute limit is 1500m"),
        ({"c": 1}, Ask("c", 1, compute_milli=1000), WaitReason.COMPUTE_LIMIT, "holds 1000m"),
    ],
)
def test_decide_table(held: dict[str, int], ask: Ask, expected: object, detail: str) -> None:
    ledger = ledger_of(*QUOTAS)
    for name, amount in held.items():
        over = max(0, amount - ledger.book[name].nominal)
        if over:
            ledger.add(lease(name, amount - over))
            ledger.add(lease(name, over, borrowed=True))
        else:
            ledger.add(lease(name, amount, compute_milli=1000))
    verdict = decide(ledger, ask, now=0.0)
    if expected == "admit":
        assert isinstance(verdict, Admit)
        assert detail in verdict.reason
    elif expected == "reject":
        assert isinstance(verdict, Reject)
        assert detail in verdict.reason
    else:
        assert isinstance(verdict, Wait)
        assert verdict.reason is expected
        assert detail in verdict.detail
        assert (verdict.reclaim_needed > 0) == (expected is WaitReason.RECLAIM_NEEDED)


def test_pod_limit_waits() -> None:
    ledger = ledger_of(*QUOTAS)
    ledger.add(lease("c", 1))
    ledger.add(lease("c", 1))
    verdict = decide(ledger, Ask("c", 1), 0.0)
    assert isinstance(verdict, Wait) and verdict.reason is WaitReason.POD_LIMIT


@pytest.mark.parametrize(
    ("mode", "admitted"), [(OnExhaustion.BLOCK, False), (OnExhaustion.PREEMPTIBLE, True)]
)
def test_budget_exhaustion(mode: OnExhaustion, admitted: bool) -> None:
    quota = TenantQuota(name="d", nominal=100 * G, budget=Budget(10.0, 86400.0, mode))
    ledger = ledger_of(quota)
    meter = Meter(ledger.book)
    running = lease("d", 4 * G, at=0.0)
    ledger.add(running)
    # 4 GiB for 2 h = 8 GiB-hours: still under budget
    assert isinstance(decide(ledger, Ask("d", G), 7200.0, meter), Admit)
    # 4 GiB for 3 h = 12 GiB-hours: spent
    verdict = decide(ledger, Ask("d", G), 3 * 3600.0, meter)
    if admitted:
        assert isinstance(verdict, Admit) and verdict.preemptible
    else:
        assert isinstance(verdict, Wait) and verdict.reason is WaitReason.BUDGET_EXHAUSTED
        assert verdict.retry_at == 86400.0
    # a new window starts afresh for closed usage
    ledger.remove(running.id)
    meter.close(running.release(3 * 3600.0))
    assert isinstance(decide(ledger, Ask("d", G), 86400.0 + 1, meter), Admit)
