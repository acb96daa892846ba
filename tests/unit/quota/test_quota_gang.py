"""Gangs in the quota core: admitted all together or not at all, reclaimed as one victim.

Properties (hypothesis, random tenants, leases and gangs): a gang decision either puts every
member's lease in the ledger or leaves the ledger exactly as it was; reclaim's victims contain
every live member of a gang or none of them."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from quota_builders import G, lease, ledger_of, tenant

from gpupool.quota.admission import Admit, Ask, Reject, Wait, WaitReason, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.gang import GangAdmit, decide_gang
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import ReclaimPlan, plan_reclaim
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota


def asks(tenant_name: str, *amounts: int) -> list[Ask]:
    return [Ask(tenant_name, a) for a in amounts]


def lease_maker(gang: str, tenant_name: str, amounts: list[int], now: float = 0.0):  # type: ignore[no-untyped-def]
    def make(i: int, verdict: Admit) -> Lease:
        return Lease(
            id=f"{gang}-{i}",
            tenant=tenant_name,
            amount=amounts[i],
            reserved_at=now,
            borrowed=verdict.borrowed,
            preemptible=verdict.preemptible,
            gang=gang,
        )

    return make


def state(ledger: Ledger) -> list[tuple[str, int, bool]]:
    return sorted((le.id, le.amount, le.borrowed) for le in ledger)


def test_a_gang_that_fits_is_admitted_whole_and_counted() -> None:
    ledger = ledger_of(tenant("a", 64 * G, cohort=None))
    verdict = decide_gang(ledger, "ns/g", asks("a", *[16 * G] * 4), 0.0,
                          lease_maker("ns/g", "a", [16 * G] * 4))  # fmt: skip
    assert isinstance(verdict, GangAdmit) and len(verdict.admits) == 4
    assert ledger.used("a") == 64 * G and ledger.pods("a") == 4


def test_a_gang_of_four_waits_while_only_three_fit_and_says_how_much() -> None:
    ledger = ledger_of(tenant("a", 64 * G, cohort=None))
    ledger.add(lease("a", 16 * G))
    before = state(ledger)
    verdict = decide_gang(ledger, "ns/g", asks("a", *[16 * G] * 4), 0.0,
                          lease_maker("ns/g", "a", [16 * G] * 4))  # fmt: skip
    assert isinstance(verdict, Wait)
    assert verdict.reason is WaitReason.NO_COHORT
    assert verdict.detail.startswith(
        "gang 'ns/g' needs 64Gi for its 4 waiting members; tenant 'a''s quota has room for 3 of "
        "them now (48Gi):"
    )
    assert state(ledger) == before  # nothing half-admitted


def test_a_gang_larger_than_the_quota_can_ever_be_is_rejected() -> None:
    ledger = ledger_of(tenant("a", 48 * G, cohort=None))
    verdict = decide_gang(ledger, "ns/g", asks("a", *[16 * G] * 4), 0.0,
                          lease_maker("ns/g", "a", [16 * G] * 4))  # fmt: skip
    assert isinstance(verdict, Reject)  # 48Gi nominal and no cohort: 64Gi can never fit
    assert verdict.reason == (
        "gang 'ns/g' (4 members) asks for 64Gi but tenant 'a''s nominal quota plus all it could "
        "borrow is 48Gi; ask for less or raise the quota"
    )
    ledger = ledger_of(tenant("a", 640 * G, cohort=None, max_pods=3))
    verdict = decide_gang(ledger, "ns/g", asks("a", *[16 * G] * 4), 0.0,
                          lease_maker("ns/g", "a", [16 * G] * 4))  # fmt: skip
    assert isinstance(verdict, Reject) and "pod limit is 3" in verdict.reason


def test_a_gang_borrows_for_its_sum_and_a_lender_within_nominal_gets_one_reclaim_need() -> None:
    ledger = ledger_of(tenant("a", 32 * G), tenant("b", 32 * G))
    verdict = decide_gang(ledger, "ns/g", asks("a", *[16 * G] * 3), 0.0,
                          lease_maker("ns/g", "a", [16 * G] * 3))  # fmt: skip
    assert isinstance(verdict, GangAdmit)
    assert [v.borrowed_amount for v in verdict.admits] == [0, 0, 16 * G]
    # b now needs its quota back for a gang of two 16Gi pods: one need, for both
    wait = decide_gang(ledger, "ns/h", asks("b", 16 * G, 16 * G), 0.0,
                       lease_maker("ns/h", "b", [16 * G] * 2))  # fmt: skip
    assert isinstance(wait, Wait) and wait.reason is WaitReason.RECLAIM_NEEDED
    assert wait.reclaim_needed == 16 * G


def test_reclaim_takes_a_borrowing_gang_as_one_victim() -> None:
    ledger = ledger_of(tenant("a", 32 * G), tenant("b", 32 * G))
    for i in range(3):  # a's gang: two within nominal, one borrowed
        ledger.add(Lease(f"g{i}", "a", 16 * G, 1.0, borrowed=(i == 2), gang="ns/g"))
    ledger.add(Lease("solo", "a", 8 * G, 0.5))
    plan = plan_reclaim(ledger, "b", 16 * G, 10.0)
    assert isinstance(plan, ReclaimPlan)
    assert sorted(n.lease_id for n in plan.notices) == ["g0", "g1", "g2"]


def test_reclaim_skips_a_gang_that_would_take_its_tenant_below_guarantee() -> None:
    ledger = ledger_of(tenant("a", 32 * G, guaranteed=24 * G), tenant("b", 32 * G))
    for i in range(3):
        ledger.add(Lease(f"g{i}", "a", 16 * G, 0.0, borrowed=(i == 2), gang="ns/g"))
    result = plan_reclaim(ledger, "b", 16 * G, 10.0)
    assert not isinstance(result, ReclaimPlan)  # 48 - 48 < 24: the gang is not taken at all


# ---- properties ----------------------------------------------------------------------------


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Ledger, list[Ask], list[int]]:
    count = draw(st.integers(2, 3))
    quotas = []
    for i in range(count):
        nominal = draw(st.integers(0, 40))
        quotas.append(
            TenantQuota(
                name=f"t{i}",
                nominal=nominal,
                guaranteed=draw(st.integers(0, nominal)),
                resource=Resource.GPU,
                borrow_limit=draw(st.one_of(st.none(), st.integers(0, 30))),
                cohort="c",
                max_pods=draw(st.one_of(st.none(), st.integers(1, 8))),
            )
        )
    ledger = Ledger(QuotaBook(quotas))
    for j in range(draw(st.integers(0, 6))):
        who = draw(st.integers(0, count - 1))
        amount = draw(st.integers(0, 15))
        ask = Ask(f"t{who}", amount)
        verdict = decide(ledger, ask, 0.0)
        if isinstance(verdict, Admit):
            # a gang lives in one tenant (the webhook and the queue see to it)
            gang = draw(st.sampled_from([None, f"ns{who}/x", f"ns{who}/y"]))
            ledger.add(Lease(f"l{j}", f"t{who}", amount, 0.0, borrowed=verdict.borrowed, gang=gang))
    amounts = draw(st.lists(st.integers(0, 15), min_size=1, max_size=5))
    who = draw(st.integers(0, count - 1))
    return ledger, [Ask(f"t{who}", a) for a in amounts], amounts


@settings(max_examples=150, deadline=None)
@given(worlds())
def test_property_a_gang_is_admitted_whole_or_not_at_all(
    world: tuple[Ledger, list[Ask], list[int]],
) -> None:
    ledger, gang_asks, amounts = world
    tenant_name = gang_asks[0].tenant
    before = state(ledger)
    verdict = decide_gang(ledger, "ns/new", gang_asks, 0.0,
                          lease_maker("ns/new", tenant_name, amounts))  # fmt: skip
    members = [le for le in ledger if le.gang == "ns/new"]
    if isinstance(verdict, GangAdmit):
        assert len(members) == len(gang_asks)
        quota = ledger.book[tenant_name]
        assert ledger.borrowed(tenant_name) <= (quota.borrow_limit or 10**9)
        assert quota.max_pods is None or ledger.pods(tenant_name) <= quota.max_pods
    else:
        assert members == [] and state(ledger) == before


@settings(max_examples=150, deadline=None)
@given(worlds(), st.integers(1, 40))
def test_property_reclaim_never_takes_half_a_gang(
    world: tuple[Ledger, list[Ask], list[int]], needed: int
) -> None:
    ledger = world[0]
    for claimant in ledger.book.names():
        plan = plan_reclaim(ledger, claimant, needed, 1.0)
        if not isinstance(plan, ReclaimPlan):
            continue
        taken = {n.lease_id for n in plan.notices}
        for gang in {le.gang for le in ledger if le.gang is not None}:
            ids = {le.id for le in ledger if le.gang == gang}
            assert ids <= taken or not (ids & taken), (gang, ids, taken)
        for name in ledger.book.names():  # never below anyone's guarantee
            gone = sum(le.amount for le in ledger.leases(name) if le.id in taken)
            if gone:
                assert ledger.used(name) - gone >= ledger.book[name].guaranteed


def test_replace_keeps_a_leases_gang() -> None:  # the controller re-marks leases with replace
    assert replace(lease("a", 1, gang="ns/g"), borrowed=True).gang == "ns/g"
