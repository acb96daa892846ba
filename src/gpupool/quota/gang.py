"""The admission decision for a gang: all its waiting members together, or none (pure).

A gang's members are decided one after another against a scratch copy of the ledger, so the
second member sees the first's usage exactly as if both were admitted (borrowing, lend limits,
pod and compute limits all apply to the sum); only when every member is admitted are their
leases written into the real ledger. If any member would wait, the gang waits with that
member's reason, told for the whole gang ("needs 64Gi for its 4 members; the quota has room for
2 of them now (24Gi)"). A gang that even an empty quota could not take (the sum over nominal plus
all it could borrow, more members than its pod limit) is rejected with the reason.

Reclaim sees the same sum: a gang within nominal whose members wait for borrowers gets one
reclaim need, what the whole gang lacks (`reclaim_needed` on the returned Wait).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpupool.quota.admission import Admit, Ask, Reject, Wait, decide
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter


@dataclass(frozen=True, slots=True)
class GangAdmit:
    """Every member admitted; `admits[i]` is the verdict of `asks[i]`."""

    tenant: str
    admits: tuple[Admit, ...]


GangVerdict = GangAdmit | Wait | Reject


def _scratch(ledger: Ledger) -> Ledger:
    copy = Ledger(ledger.book)
    for lease in ledger:
        copy.add(lease)
    return copy


def _summed(asks: Sequence[Ask]) -> Ask:
    return Ask(
        tenant=asks[0].tenant,
        amount=sum(a.amount for a in asks),
        compute_milli=sum(a.compute_milli for a in asks),
        exclusive=any(a.exclusive for a in asks),
        priority=max(a.priority for a in asks),
    )


def decide_gang(
    ledger: Ledger,
    gang: str,
    asks: Sequence[Ask],
    now: float,
    lease_of: Callable[[int, Admit], Lease],
    meter: Meter | None = None,
) -> GangVerdict:
    """Admit all of `asks` (the gang's waiting members, one tenant) or none.

    `lease_of(i, admit)` is the lease member i holds once admitted; on GangAdmit those leases
    are in `ledger`, otherwise the ledger is untouched."""
    if not asks:
        raise ValueError(f"gang {gang}: no members to decide")
    tenant = asks[0].tenant
    quota = ledger.book.get(tenant)
    who = f"gang {gang!r}"
    if quota is None:
        return Reject(tenant, f"tenant {tenant!r} has no quota; known tenants: "
                              f"{ledger.book.names()}")  # fmt: skip
    fmt = quota.resource.format
    total = _summed(asks)
    if quota.max_pods is not None and len(asks) > quota.max_pods:
        return Reject(
            tenant,
            f"{who} has {len(asks)} members but tenant {tenant!r}'s pod limit is "
            f"{quota.max_pods}; make the gang smaller or raise the limit",
        )
    alone = decide(Ledger(ledger.book), total, now)  # an empty quota: could it ever?
    if isinstance(alone, Reject):
        return Reject(tenant, f"{who} ({len(asks)} members) {alone.reason}")

    scratch = _scratch(ledger)
    admits: list[Admit] = []
    leases: list[Lease] = []
    for i, ask in enumerate(asks):
        verdict = decide(scratch, ask, now, meter)
        if isinstance(verdict, Admit):
            lease = lease_of(i, verdict)
            scratch.add(lease)
            admits.append(verdict)
            leases.append(lease)
            continue
        if isinstance(verdict, Reject):
            return Reject(tenant, f"{who}: member {i + 1} of {len(asks)} {verdict.reason}")
        fitted = sum(a.amount for a in asks[:i])
        detail = (
            f"{who} needs {fmt(total.amount)} for its {len(asks)} waiting members; tenant "
            f"{tenant!r}'s quota has room for {i} of them now ({fmt(fitted)}): "
            f"{verdict.detail}"
        )
        # the whole gang's standing names the reason (and what a reclaim must free for all of
        # it); where the sum passes but a member does not (a pod limit), the member's
        whole = decide(ledger, total, now, meter)
        basis = whole if isinstance(whole, Wait) else verdict
        return replace(
            basis, detail=detail, retry_at=basis.retry_at if basis.retry_at else verdict.retry_at
        )
    for lease in leases:
        ledger.add(lease)
    return GangAdmit(tenant, tuple(admits))
