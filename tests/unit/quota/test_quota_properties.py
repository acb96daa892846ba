"""Invariants of the quota core under random tenants and random admit / release / reclaim runs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.errors import InvalidQuota
from gpupool.quota.admission import Admit, Ask, Wait, WaitReason, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import ReclaimPlan, _freed, plan_reclaim
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota


@st.composite
def quotas(draw: st.DrawFn) -> list[TenantQuota]:
    count = draw(st.integers(2, 4))
    out = []
    for i in range(count):
        nominal = draw(st.integers(0, 40))
        guaranteed = draw(st.integers(0, nominal))
        borrow = draw(st.one_of(st.none(), st.integers(0, 30)))
        lend = draw(st.one_of(st.none(), st.integers(0, nominal)))
        out.append(
            TenantQuota(
                name=f"t{i}",
                nominal=nominal,
                guaranteed=guaranteed,
                resource=Resource.GPU,
                borrow_limit=borrow,
                lend_limit=lend,
                cohort="c",
                priority=draw(st.integers(0, 2)),
            )
        )
    return out


@dataclass
class Op:
    kind: str  # "ask" | "release"
    tenant: int
    amount: int
    exclusive: bool
    priority: int
    pick: int


ops = st.lists(
    st.builds(
        Op,
        kind=st.sampled_from(["ask", "ask", "release"]),
        tenant=st.integers(0, 3),
        amount=st.integers(1, 15),
        exclusive=st.booleans(),
        priority=st.integers(0, 3),
        pick=st.integers(0, 1000),
    ),
    min_size=10,
    max_size=80,
)


def check_invariants(ledger: Ledger, model: dict[str, Lease]) -> None:
    book = ledger.book
    for quota in book:
        live = [le for le in model.values() if le.tenant == quota.name]
        used = sum(le.amount for le in live)
        # the sum of leases equals what the ledger says is allocated, per tenant and in all
        assert ledger.used(quota.name) == used
        assert ledger.pods(quota.name) == len(live)
        # quota is never exceeded beyond the borrow limit
        limit = quota.nominal + (quota.borrow_limit if quota.borrow_limit is not None else 10**9)
        assert used <= limit
        # what is marked borrowed covers everything over nominal
        assert ledger.borrowed_marked(quota.name) >= ledger.borrowed(quota.name)
        # the reclaimable index is exactly the reclaimable leases
        assert {le.id for le in ledger.reclaimable_leases(quota.name)} == {
            le.id for le in ledger.leases(quota.name) if le.reclaimable
        }
        # exclusive leases never borrowed
        assert not any(le.exclusive and le.borrowed for le in live)
    assert ledger.total_used() == sum(le.amount for le in model.values())
    assert 0 <= ledger.pool_used("c") <= book.pool_capacity("c")
    # lenders never lend more than their lend limit in all
    assert sum(ledger.borrowed(q.name) for q in book) <= book.pool_capacity("c")


@settings(max_examples=150, deadline=None)
@given(quotas(), ops)
def test_random_runs_keep_every_invariant(qs: list[TenantQuota], steps: list[Op]) -> None:
    book = QuotaBook(qs)
    ledger = Ledger(book)
    model: dict[str, Lease] = {}
    now = 0.0
    seq = 0
    for op in steps:
        now += 1.0
        name = qs[op.tenant % len(qs)].name
        if op.kind == "release":
            if model:
                victim = sorted(model)[op.pick % len(model)]
                del model[victim]
                ledger.remove(victim)
        else:
            ask = Ask(name, op.amount, exclusive=op.exclusive, priority=op.priority)
            verdict = decide(ledger, ask, now)
            if isinstance(verdict, Wait) and verdict.reason is WaitReason.RECLAIM_NEEDED:
                guaranteed_before = {q.name: ledger.used(q.name) for q in book}
                plan = plan_reclaim(ledger, name, verdict.reclaim_needed, now)
                if isinstance(plan, ReclaimPlan):
                    for notice in plan.notices:
                        assert notice.tenant != name
                        lease = model.pop(notice.lease_id)
                        assert lease.reclaimable
                        ledger.remove(lease.id)
                    for quota in book:
                        # guaranteed usage is never reclaimed
                        if ledger.used(quota.name) < guaranteed_before[quota.name]:
                            assert ledger.used(quota.name) >= quota.guaranteed
                    verdict = decide(ledger, ask, now)
                    # the reclaim freed what the claimant needed
                    assert isinstance(verdict, Admit), verdict
            if isinstance(verdict, Admit):
                seq += 1
                lease = Lease(
                    id=f"l{seq}",
                    tenant=name,
                    amount=op.amount,
                    reserved_at=now,
                    priority=op.priority,
                    borrowed=verdict.borrowed,
                    exclusive=op.exclusive,
                )
                model[lease.id] = lease
                ledger.add(lease)
        check_invariants(ledger, model)


@settings(max_examples=200, deadline=None)
@given(
    quotas(),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12), st.integers(0, 3)), max_size=30),
    st.integers(0, 3),
    st.integers(1, 40),
)
def test_every_reclaim_frees_enough_with_no_spare_victim(
    qs: list[TenantQuota], held: list[tuple[int, int, int]], claimant_i: int, needed: int
) -> None:
    book = QuotaBook(qs)
    ledger = Ledger(book)
    for n, (who, amount, prio) in enumerate(held):
        name = qs[who % len(qs)].name
        nominal = book[name].nominal
        borrowed = ledger.used(name) + amount > nominal
        ledger.add(
            Lease(
                id=f"l{n}",
                tenant=name,
                amount=amount,
                reserved_at=float(n),
                priority=prio,
                borrowed=borrowed,
            )
        )
    claimant = qs[claimant_i % len(qs)].name
    plan = plan_reclaim(ledger, claimant, needed, now=100.0)
    if not isinstance(plan, ReclaimPlan):
        return
    victims = [ledger.lease(n.lease_id) for n in plan.notices]
    assert all(v is not None for v in victims)
    chosen = [v for v in victims if v is not None]
    assert _freed(ledger, chosen) >= needed
    assert plan.freed >= needed
    for victim in chosen:
        assert victim.reclaimable and victim.tenant != claimant
        rest = [v for v in chosen if v.id != victim.id]
        assert _freed(ledger, rest) < needed, "a victim could have been spared"
    taken: dict[str, int] = {}
    for victim in chosen:
        taken[victim.tenant] = taken.get(victim.tenant, 0) + victim.amount
    for tenant_name, amount in taken.items():
        assert ledger.used(tenant_name) - amount >= book[tenant_name].guaranteed
        assert ledger.used(tenant_name) > book[tenant_name].nominal  # only from borrowers


@st.composite
def held(draw: st.DrawFn) -> tuple[list[TenantQuota], list[Lease]]:
    """Quotas, some in a cohort and some alone, and live leases of their tenants."""
    book = draw(quotas())
    book = [
        q if draw(st.booleans()) else TenantQuota(q.name, q.nominal, resource=Resource.GPU)
        for q in book
    ]
    leases = [
        Lease(
            id=f"l{i}",
            tenant=f"t{draw(st.integers(0, len(book) - 1))}",
            amount=draw(st.integers(0, 20)),
            reserved_at=float(i),
            compute_milli=draw(st.integers(0, 1000)),
            borrowed=draw(st.booleans()),
            preemptible=draw(st.booleans()),
            exclusive=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 12)))
    ]
    return book, leases


def _state(ledger: Ledger, book: QuotaBook) -> object:
    return (
        [(q.name, ledger.used(q.name), ledger.borrowed_marked(q.name), ledger.pods(q.name),
          ledger.compute(q.name), [le.id for le in ledger.leases(q.name)],
          [le.id for le in ledger.reclaimable_leases(q.name)], ledger.lent(q.name))
         for q in book],
        {c: ledger.pool_used(c) for c in book.cohorts()},
        len(ledger),
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(held())
def test_a_ledger_made_in_one_pass_is_the_ledger_added_to_lease_by_lease(
    made: tuple[list[TenantQuota], list[Lease]],
) -> None:
    quotas_, leases = made
    book = QuotaBook(quotas_)
    one_by_one = Ledger(book)
    for lease in leases:
        one_by_one.add(lease)
    at_once = Ledger.of(book, leases)
    assert _state(at_once, book) == _state(one_by_one, book)
    if leases:  # and it refuses what `add` refuses
        with pytest.raises(InvalidQuota, match="already in the ledger"):
            Ledger.of(book, [*leases, leases[0]])
