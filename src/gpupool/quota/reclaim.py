"""Reclaim: which borrowed leases give a lender its quota back, and when they are evicted.

When a tenant within its nominal quota finds its cohort's pool held by borrowers (admission's
`RECLAIM_NEEDED`), `plan_reclaim` picks victims:
- only reclaimable leases: borrowed ones of tenants now over their nominal quota, or any admitted
  as preemptible; never exclusive ones, never the claimant's own, only in the claimant's cohort;
- leases admitted as preemptible (a spent budget) first, then from the tenant that is furthest
  over its nominal quota, then lowest lease priority, then newest first;
- never taking a tenant's usage below its guaranteed quota;
- then pruned, least-preferred victim first, to a set from which no victim can be spared: every
  victim is needed to free what the claimant needs;
- a gang (`Lease.gang`) is one victim: all its live members or none, never half a gang. It is a
  candidate when one of its members is (borrowed or preemptible) and none is exclusive; its
  place in the order is its most preferred member's, the guarantee floor is checked for its
  sum. Reclaim for room (`reclaim_sites`, one node) never takes a gang's member.
(A set of the fewest possible victims under the guarantee caps is a knapsack problem; the pruned
preference-order set is what we return.)
The plan is a set of notices; each victim's eviction falls due after its tenant's grace period.
Nothing here acts: the caller sends the notices and, when `due`, evicts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger


@dataclass(frozen=True, slots=True)
class Notice:
    lease_id: str
    tenant: str
    amount: int
    noticed_at: float
    evict_at: float


@dataclass(frozen=True, slots=True)
class Evict:
    lease_id: str
    tenant: str
    at: float


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    claimant: str
    needed: int
    freed: int  # pool capacity the new notices free (beyond notices already pending)
    notices: tuple[Notice, ...]


@dataclass(frozen=True, slots=True)
class NoReclaim:
    claimant: str
    needed: int
    reason: str


def _freed(ledger: Ledger, chosen: Iterable[Lease]) -> int:
    """Pool capacity freed by ending `chosen`: the drop in each owner's draw on the pool."""
    by_tenant: dict[str, int] = {}
    for lease in chosen:
        by_tenant[lease.tenant] = by_tenant.get(lease.tenant, 0) + lease.amount
    return sum(
        ledger.pool_share(t) - ledger.pool_share(t, ledger.used(t) - amount)
        for t, amount in by_tenant.items()
    )


Unit = tuple[Lease, ...]  # one victim: a lease alone, or every live member of a gang


def _order(ledger: Ledger, claimant: str) -> list[str]:
    """The claimant's cohort members to take from, in order: furthest over nominal first."""
    book = ledger.book
    members = [m for m in book.cohort(book[claimant].cohort) if m.name != claimant]
    ranked = sorted(members, key=lambda m: (-ledger.borrowed(m.name), m.priority, m.name))
    return [m.name for m in ranked]


def _rank(lease: Lease, tenant_rank: int) -> tuple[bool, int, int, float, str]:
    # preemptible (a spent budget) first, whoever runs it; then the tenant order, priority,
    # newest first
    return (not lease.preemptible, tenant_rank, lease.priority, -lease.reserved_at, lease.id)


def units(ledger: Ledger, claimant: str, exclude: Collection[str] = ()) -> list[Unit]:
    """The victims reclaim may take for `claimant`, in the order they should be taken: single
    reclaimable leases and whole gangs (see the module docstring)."""
    ranked: list[tuple[tuple[bool, int, int, float, str], Unit]] = []
    for rank, tenant in enumerate(_order(ledger, claimant)):
        borrowing = ledger.borrowed(tenant) > 0
        gangs: dict[str, list[Lease]] = {}
        for lease in ledger.leases(tenant):
            if lease.gang is not None:
                gangs.setdefault(lease.gang, []).append(lease)
            elif lease.reclaimable and (borrowing or lease.preemptible) and lease.id not in exclude:
                ranked.append((_rank(lease, rank), (lease,)))
        for members in gangs.values():
            takeable = [le for le in members if le.reclaimable and (borrowing or le.preemptible)]
            if not takeable or any(le.exclusive for le in members):
                continue
            if any(le.id in exclude for le in members):
                continue  # under notice already (as a whole)
            unit = tuple(sorted(members, key=lambda le: le.id))
            ranked.append((min(_rank(le, rank) for le in takeable), unit))
    ranked.sort(key=lambda item: item[0])
    return [unit for _, unit in ranked]


def candidates(ledger: Ledger, claimant: str, exclude: Collection[str] = ()) -> list[Lease]:
    """Reclaimable leases of the claimant's cohort in the order they should be taken, gangs'
    members aside (reclaim for room takes leases on one node, never half a gang)."""
    book = ledger.book
    cohort = book[claimant].cohort
    members = [m for m in book.cohort(cohort) if m.name != claimant]
    ranked = sorted(members, key=lambda m: (-ledger.borrowed(m.name), m.priority, m.name))
    order: list[Lease] = []
    for member in ranked:
        borrowing = ledger.borrowed(member.name) > 0
        leases = [
            le
            for le in ledger.reclaimable_leases(member.name)
            if (borrowing or le.preemptible) and le.id not in exclude and le.gang is None
        ]
        leases.sort(key=lambda le: (le.priority, -le.reserved_at, le.id))
        order.extend(leases)
    # Work admitted as preemptible (its tenant's budget was spent) goes first, whoever runs it.
    order.sort(key=lambda le: not le.preemptible)
    return order


def plan_reclaim(
    ledger: Ledger,
    claimant: str,
    needed: int,
    now: float,
    pending: Collection[str] = (),
) -> ReclaimPlan | NoReclaim:
    """Victims that free at least `needed` of the cohort pool for `claimant`.

    `pending` are leases already under notice: what they will free counts first, and they are not
    chosen again.
    """
    book = ledger.book
    if book[claimant].cohort is None:
        return NoReclaim(claimant, needed, f"tenant {claimant!r} is in no cohort")
    pending_leases = [le for le in (ledger.lease(i) for i in pending) if le is not None]
    base = _freed(ledger, pending_leases)
    if base >= needed:
        return ReclaimPlan(claimant, needed, 0, ())
    taken: list[Lease] = list(pending_leases)
    chosen: list[Unit] = []
    taken_by: dict[str, int] = {}
    for lease in pending_leases:
        taken_by[lease.tenant] = taken_by.get(lease.tenant, 0) + lease.amount
    freed = base
    for unit in units(ledger, claimant, exclude=pending):
        tenant = unit[0].tenant
        floor = book[tenant].guaranteed
        already = taken_by.get(tenant, 0)
        amount = sum(le.amount for le in unit)
        if ledger.used(tenant) - already - amount < floor:
            continue
        taken.extend(unit)
        chosen.append(unit)
        taken_by[tenant] = already + amount
        freed = _freed(ledger, taken)
        if freed >= needed:
            break
    if freed < needed:
        fmt = book[claimant].resource.format
        return NoReclaim(
            claimant,
            needed,
            f"borrowed leases in cohort {book[claimant].cohort!r} free at most {fmt(freed)} "
            f"without taking anyone below guaranteed; {fmt(needed)} is needed",
        )
    for unit in reversed(list(chosen)):
        ids = {le.id for le in unit}
        rest = [le for le in taken if le.id not in ids]
        if _freed(ledger, rest) >= needed:
            taken = rest
            chosen.remove(unit)
    freed_new = _freed(ledger, taken) - base
    notices = tuple(
        Notice(
            lease_id=le.id,
            tenant=le.tenant,
            amount=le.amount,
            noticed_at=now,
            evict_at=now + book[le.tenant].reclaim_grace_s,
        )
        for unit in chosen
        for le in unit
    )
    return ReclaimPlan(claimant, needed, freed_new, notices)


def due(notices: Iterable[Notice], now: float) -> list[Evict]:
    """Evictions whose grace period has run out by `now`."""
    return [Evict(n.lease_id, n.tenant, n.evict_at) for n in notices if n.evict_at <= now]
