"""`quota.admission.decide`'s steps, each over one `AskState`: never_fits (rule 1), budget_gate
(rule 2), limits_gate (rule 3), borrow_gate and cohort_gate (rules 4 and 5), admit."""

from __future__ import annotations

from quota_builders import G, lease, ledger_of, tenant

from gpupool.quota.admission import (
    Ask,
    AskState,
    Wait,
    WaitReason,
    admit,
    borrow_gate,
    budget_gate,
    cohort_gate,
    limits_gate,
    never_fits,
)
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

A = tenant("a", 10 * G, borrow_limit=6 * G)
B = tenant("b", 10 * G)


def state(ledger: Ledger, ask: Ask, now: float = 0.0, meter: Meter | None = None) -> AskState:
    return AskState.of(ledger, ask, ledger.book[ask.tenant], now, meter)


def test_the_state_splits_what_is_above_nominal() -> None:
    ledger = ledger_of(A, B)
    ledger.add(lease("a", 8 * G))
    s = state(ledger, Ask("a", 4 * G))
    assert (s.used, s.after, s.over_after, s.borrowed_amount) == (8 * G, 12 * G, 2 * G, 2 * G)
    ledger.add(lease("a", 4 * G, borrowed=True))
    s = state(ledger, Ask("a", 1 * G))  # already 2G over: only its own 1G is borrowed
    assert (s.over_after, s.borrowed_amount) == (3 * G, 1 * G)


def test_never_fits_past_all_it_could_borrow_or_a_pod_limit_of_zero() -> None:
    ledger = ledger_of(A, B, TenantQuota("z", nominal=G, max_pods=0))
    assert never_fits(state(ledger, Ask("a", 16 * G))) is None  # nominal 10 + borrow limit 6
    too_big = never_fits(state(ledger, Ask("a", 17 * G)))
    assert too_big is not None and "nominal quota plus all it could borrow is 16Gi" in (
        too_big.reason
    )
    exclusive = never_fits(state(ledger, Ask("a", 11 * G, exclusive=True)))
    assert exclusive is not None and "exclusive pods never borrow" in exclusive.reason
    zero = never_fits(state(ledger, Ask("z", 1)))
    assert zero is not None and zero.reason == "tenant 'z' has a pod limit of 0"


def test_budget_gate_holds_or_admits_as_preemptible_once_spent() -> None:
    for mode, expected in ((OnExhaustion.BLOCK, Wait), (OnExhaustion.PREEMPTIBLE, True)):
        quota = TenantQuota(name="d", nominal=100 * G, budget=Budget(10.0, 86400.0, mode))
        ledger = ledger_of(quota)
        meter = Meter(ledger.book)
        ledger.add(lease("d", 4 * G, at=0.0))
        assert budget_gate(state(ledger, Ask("d", G), 7200.0, meter)) is False  # 8 of 10
        spent = budget_gate(state(ledger, Ask("d", G), 3 * 3600.0, meter))  # 12 of 10
        if expected is Wait:
            assert isinstance(spent, Wait) and spent.reason is WaitReason.BUDGET_EXHAUSTED
            assert spent.retry_at == 86400.0
        else:
            assert spent is True
        assert budget_gate(state(ledger, Ask("d", G), 3 * 3600.0)) is False  # no meter


def test_limits_gate_waits_at_the_pod_and_compute_limits() -> None:
    c = TenantQuota(name="c", nominal=4 * G, max_pods=2, compute_limit_milli=1500)
    ledger = ledger_of(c)
    ledger.add(lease("c", 1, compute_milli=1000))
    assert limits_gate(state(ledger, Ask("c", 1, compute_milli=500))) is None
    compute = limits_gate(state(ledger, Ask("c", 1, compute_milli=600)))
    assert compute is not None and compute.reason is WaitReason.COMPUTE_LIMIT
    ledger.add(lease("c", 1))
    pods = limits_gate(state(ledger, Ask("c", 1)))
    assert pods is not None and pods.detail == "tenant 'c' runs 2 of 2 pods"


def test_borrow_gate_only_over_nominal() -> None:
    ledger = ledger_of(A, B, TenantQuota(name="c", nominal=4 * G))
    ledger.add(lease("a", 10 * G))
    assert borrow_gate(state(ledger, Ask("b", 10 * G))) is None  # within b's nominal
    assert borrow_gate(state(ledger, Ask("a", 6 * G))) is None
    limit = borrow_gate(state(ledger, Ask("a", 7 * G)))
    assert limit is not None and limit.reason is WaitReason.BORROW_LIMIT
    exclusive = borrow_gate(state(ledger, Ask("a", G, exclusive=True)))
    assert exclusive is not None and exclusive.reason is WaitReason.OVER_NOMINAL_EXCLUSIVE
    alone = borrow_gate(state(ledger, Ask("c", 5 * G)))
    assert alone is not None and alone.reason is WaitReason.NO_COHORT


def test_cohort_gate_asks_for_reclaim_within_nominal_and_waits_over_it() -> None:
    ledger = ledger_of(A, B)
    ledger.add(lease("a", 10 * G))
    ledger.add(lease("a", 5 * G, borrowed=True))
    assert cohort_gate(state(ledger, Ask("b", 5 * G))) is None
    reclaim = cohort_gate(state(ledger, Ask("b", 6 * G)))
    assert reclaim is not None and reclaim.reason is WaitReason.RECLAIM_NEEDED
    assert reclaim.reclaim_needed == G
    exhausted = cohort_gate(state(ledger, Ask("a", 6 * G)))
    assert exhausted is not None and exhausted.reason is WaitReason.COHORT_EXHAUSTED


def test_admit_says_what_is_borrowed_and_when_preemptible() -> None:
    ledger = ledger_of(A, B)
    ledger.add(lease("a", 8 * G))
    borrowing = admit(state(ledger, Ask("a", 4 * G)), preemptible=False)
    assert borrowing.borrowed_amount == 2 * G and borrowing.reason.startswith("borrows 2Gi")
    within = admit(state(ledger, Ask("a", G)), preemptible=True)
    assert not within.borrowed and within.preemptible
    assert within.reason == "within nominal quota (9Gi of 10Gi); budget spent, admitted as " + (
        "preemptible"
    )
