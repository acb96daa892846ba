"""Reclaim for room: borrowed leases whose eviction lets a lender's waiting pod be placed.

A tenant within its nominal quota can be admitted by quota and still find no card, because
borrowers hold the capacity. Freeing quota anywhere does not help such a pod: a pod runs on one
node (a *site*), so what must be freed is room at one site. `plan_site_reclaim` looks site by site
for borrowed leases whose eviction makes the pod fit there. Where a lease runs (`site_of`) and
whether the pod fits at a site once some leases are gone (`fits`, a what-if on the caller's
placement state) are the caller's questions; the planner itself stays pure.

The rules are `plan_reclaim`'s:
- victims come only from `candidates` (borrowed or preemptible, never exclusive, other tenants
  of the claimant's cohort that are borrowing now), never taking a tenant below its guaranteed
  quota (leases already under notice count as taken);
- at each site, candidates in preference order (furthest-over tenant, lowest priority, newest)
  until the pod fits, then pruned, least-preferred first, so that no victim can be spared;
- among the sites where that works: the fewest victims, then the most preferred ones;
- when the claimant is also short of quota (`needed` > 0), victims from any site are added in
  preference order until the cohort pool frees `needed` (notices already pending count, as in
  `plan_reclaim`), then those additions are pruned the same way.
Leases already under notice are not chosen again and are not counted as room at a site: the room
they free is promised to whoever claimed it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import NoReclaim, Notice, ReclaimPlan, _freed, candidates

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True, slots=True)
class SitePlan(Generic[S]):
    site: S  # where the claimant's pod fits once the victims are gone
    plan: ReclaimPlan


def _within_floor(ledger: Ledger, lease: Lease, taken_by: dict[str, int]) -> bool:
    floor = ledger.book[lease.tenant].guaranteed
    return ledger.used(lease.tenant) - taken_by.get(lease.tenant, 0) - lease.amount >= floor


def _take(lease: Lease, taken_by: dict[str, int]) -> None:
    taken_by[lease.tenant] = taken_by.get(lease.tenant, 0) + lease.amount


def _room_at(
    ledger: Ledger,
    site: S,
    leases: Sequence[Lease],
    fits: Callable[[S, Sequence[Lease]], bool],
    base: dict[str, int],
) -> list[Lease] | None:
    """The pruned victims at `site` that make the pod fit there, or None when none do.

    `fits` is taken to be monotone (more leases gone, more room), so a site where even every
    lease the guarantees allow to go leaves no room is given up after one question.
    """
    taken_by = dict(base)
    eligible: list[Lease] = []
    for lease in leases:
        if _within_floor(ledger, lease, taken_by):
            eligible.append(lease)
            _take(lease, taken_by)
    if not fits(site, eligible):
        return None
    chosen: list[Lease] = []
    if not fits(site, chosen):
        for lease in eligible:
            chosen.append(lease)
            if fits(site, chosen):
                break
    for lease in reversed(list(chosen)):
        rest = [le for le in chosen if le.id != lease.id]
        if fits(site, rest):
            chosen = rest
    return chosen


def _top_up(
    ledger: Ledger,
    order: Sequence[Lease],
    chosen: list[Lease],
    pending: list[Lease],
    needed: int,
) -> list[Lease] | None:
    """`chosen` plus what else must go for the pool to free `needed`, or None if it cannot."""
    taken = [*pending, *chosen]
    if _freed(ledger, taken) >= needed:
        return chosen
    taken_by: dict[str, int] = {}
    for lease in taken:
        _take(lease, taken_by)
    ids = {le.id for le in chosen}
    extra: list[Lease] = []
    for lease in order:
        if lease.id in ids or not _within_floor(ledger, lease, taken_by):
            continue
        extra.append(lease)
        _take(lease, taken_by)
        if _freed(ledger, [*taken, *extra]) >= needed:
            break
    else:
        return None
    for lease in reversed(list(extra)):
        rest = [le for le in extra if le.id != lease.id]
        if _freed(ledger, [*taken, *rest]) >= needed:
            extra = rest
    return [*chosen, *extra]


def plan_site_reclaim(
    ledger: Ledger,
    claimant: str,
    site_of: Callable[[Lease], S | None],
    fits: Callable[[S, Sequence[Lease]], bool],
    now: float,
    needed: int = 0,
    pending: Collection[str] = (),
) -> SitePlan[S] | NoReclaim:
    """Victims whose eviction lets the claimant's pod fit at one site (and frees `needed`).

    `site_of(lease)` is where a lease runs (None: nowhere the pod could go); `fits(site, gone)`
    says whether the pod fits at `site` once the leases `gone` have ended. Only sites holding a
    candidate lease are asked.
    """
    book = ledger.book
    cohort = book[claimant].cohort
    if cohort is None:
        return NoReclaim(claimant, needed, f"tenant {claimant!r} is in no cohort")
    pending_leases = [le for le in (ledger.lease(i) for i in pending) if le is not None]
    base: dict[str, int] = {}
    for lease in pending_leases:
        _take(lease, base)
    order = candidates(ledger, claimant, exclude=pending)
    rank = {le.id: k for k, le in enumerate(order)}
    by_site: dict[S, list[Lease]] = {}
    for lease in order:
        site = site_of(lease)
        if site is not None:
            by_site.setdefault(site, []).append(lease)
    best: tuple[tuple[int, list[int]], S, list[Lease]] | None = None
    for site, leases in by_site.items():
        room = _room_at(ledger, site, leases, fits, base)
        if room is None:
            continue
        victims = _top_up(ledger, order, room, pending_leases, needed)
        if victims is None:
            continue
        key = (len(victims), sorted(rank[v.id] for v in victims))
        if best is None or key < best[0]:
            best = (key, site, victims)
    if best is None:
        return NoReclaim(
            claimant,
            needed,
            f"no node has room for the pod once borrowed leases in cohort {cohort!r} there are "
            f"evicted (without taking anyone below guaranteed)",
        )
    _, site, victims = best
    freed = _freed(ledger, [*pending_leases, *victims]) - _freed(ledger, pending_leases)
    notices = tuple(
        Notice(
            lease_id=le.id,
            tenant=le.tenant,
            amount=le.amount,
            noticed_at=now,
            evict_at=now + book[le.tenant].reclaim_grace_s,
        )
        for le in victims
    )
    return SitePlan(site, ReclaimPlan(claimant, needed, freed, notices))
