"""The lease lifecycle over one snapshot, pure: which GpuLeases move on, end, or are collected.

For each GpuLease, through the core's lifecycle (`quota.lease`: Reserved → Bound → Active →
Released | Expired | Lost | Reclaimed, the transitions `ALLOWED` permits; each move is the core
`Lease`'s own transition, which also meters the GiB-hours):
- its pod is gone (no pod with the lease's pod uid) or finished (Succeeded/Failed): Released,
  metered in GiB-hours from the reservation to now; a pod that is being deleted keeps its lease
  until it is gone, since its container may still use the card. Reclaimed instead (reason
  Evicted, metered the same) when reclaim recorded its eviction on the lease (`status.reclaim`,
  written by `reclaim.apply_reclaim` after the Eviction API took the pod): the lease still holds
  its capacity through the pod's termination and ends only once the pod is gone or finished;
  Released with reason BudgetDrained when a spent `drain` budget evicted it (`status.reclaim`
  reason BudgetDrain, written by `budget.drain_reconcile`);
- its expiry (`spec.expiry`) has passed: while the pod lives, `leases.expiry` gives it a notice
  and evicts it after its tenant's grace period; once it is gone or finished the lease is
  Expired (metered to then: the pod held the card through the grace period);
- its pod is bound to a node: Bound; running: Active. A lease still Reserved whose pod already
  runs (the controller saw neither step in time) goes through Bound on the way: one write
  records both steps (`boundAt` and `activeAt`), since the core has no Reserved → Active;
- ended longer than `retention_s` ago: deleted (garbage collection), but not before the budget
  window its end falls in is over (`budgets`: the tenants' budgets), since the budget meter
  counts the window's hours from the leases themselves;
- still Reserved `reserved_timeout_s` after it was made, its pod alive but bound to no node: a
  stale reservation (a bind that never reached its Binding, or whose pod kube-scheduler placed
  elsewhere): swept, i.e. deleted once a fresh read of the pod confirms it is still unbound.
  Deleted, not Released: the lease is named after the pod uid, so an ended one would stop the
  pod's next bind from creating its lease; the pod never ran on it, so nothing is metered.
  A claim pod's lease is never swept: its ResourceClaim stays allocated to that node and card
  (kube-scheduler binds the pod there whenever it can, however late), so the lease keeps the
  bytes counted until the pod is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.quota.lease import IllegalLeaseTransition, Lease, LeasePhase
from gpupool.quota.spec import Budget
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView

# Far beyond any bind (the extender refuses a bind it cannot start within seconds, and
# kube-scheduler gives one up after its httpTimeout), so a bind in flight is never swept.
RESERVED_TIMEOUT_S = 120.0
# `status.reclaim` reason of a lease whose pod a spent `drain` budget evicted (`budget.drain`)
BUDGET_DRAIN = "BudgetDrain"


@dataclass(frozen=True, slots=True)
class Move:
    """Move the lease to `to.phase`: `to` is the core lease after the transition (its
    `bound_at`, `active_at`, `ended_at` and GiB-hours are what the status records)."""

    lease: LeaseRecord
    to: Lease
    reason: str
    message: str

    @property
    def phase(self) -> LeasePhase:
        return self.to.phase

    @property
    def gib_hours(self) -> float | None:
        """Metered once it ends (to its end), else None."""
        end = self.to.ended_at
        return None if end is None else self.to.gib_hours(end)


@dataclass(frozen=True, slots=True)
class Collect:
    lease: LeaseRecord


@dataclass(frozen=True, slots=True)
class LeasePlan:
    moves: tuple[Move, ...]
    collect: tuple[Collect, ...]
    unsure: tuple[LeaseRecord, ...]  # pod not in the snapshot: look it up before releasing
    sweep: tuple[LeaseRecord, ...] = ()  # stale reservations: delete if the pod is still unbound


def _ended(lease: LeaseRecord, acct: Lease, reason: str, what: str, now: float) -> Move:
    """The lease of a pod that is gone or finished: Expired when it outlived its expiry (the
    pod evicted after its notice, or gone by itself meanwhile), Reclaimed when reclaim evicted
    the pod, else Released; metered to now in every case (the pod held the card until then)."""
    if acct.is_due(now):
        assert acct.expires_at is not None
        message = f"{what}; the lease expired at {format_time(acct.expires_at)}, not renewed"
        return Move(lease, acct.expire(now, held_until=now), "Expired", message)
    record = lease.reclaim
    if record is None:
        return Move(lease, acct.release(now), reason, what)
    if record.reason == BUDGET_DRAIN:  # evicted because its tenant's budget ran out: no reclaim
        message = f"{what}; evicted at {format_time(record.at)}: {record.message}"
        return Move(lease, acct.release(now), "BudgetDrained", message)
    message = f"{what}; reclaim evicted it at {format_time(record.at)}: {record.message}"
    try:
        return Move(lease, acct.reclaim(now), "Evicted", message)
    except IllegalLeaseTransition as err:  # not borrowed nor preemptible: the core says no
        return Move(lease, acct.release(now), reason, f"{message} ({err})")


def _running(lease: LeaseRecord, acct: Lease, pod: PodView, now: float) -> Move:
    """Active, through Bound when the lease is still Reserved (the core's only way there)."""
    bound = acct.bind(now) if acct.phase is LeasePhase.RESERVED else acct
    return Move(lease, bound.activate(now), "PodRunning", f"pod {pod.key} runs")


def _metered_out(lease: LeaseRecord, budgets: Mapping[str, Budget], now: float) -> bool:
    """True once no budget window still counts the ended lease's hours."""
    budget = budgets.get(lease.tenant)
    return budget is None or budget.window_end(lease.end or lease.start) <= now


def plan_leases(
    leases: list[LeaseRecord],
    pods_by_uid: Mapping[str, PodView],
    now: float,
    *,
    retention_s: float = 3600.0,
    reserved_timeout_s: float | None = RESERVED_TIMEOUT_S,
    known_gone: frozenset[str] = frozenset(),
    budgets: Mapping[str, Budget] | None = None,
) -> LeasePlan:
    """`known_gone`: pod uids confirmed absent by a direct lookup; `reserved_timeout_s`: None
    never sweeps."""
    moves: list[Move] = []
    collect: list[Collect] = []
    unsure: list[LeaseRecord] = []
    sweep: list[LeaseRecord] = []
    for lease in leases:
        if lease.phase.terminal:
            if (lease.end or lease.start) + retention_s <= now and _metered_out(
                lease, budgets or {}, now
            ):
                collect.append(Collect(lease))
            continue
        acct = lease.accounting(now)
        pod = pods_by_uid.get(lease.pod.uid)
        if pod is None:
            if lease.pod.uid in known_gone:
                what = f"pod {lease.pod.key} ({lease.pod.uid}) is gone"
                moves.append(_ended(lease, acct, "PodGone", what, now))
            else:
                unsure.append(lease)
            continue
        if pod.terminal:
            moves.append(_ended(lease, acct, "PodCompleted", f"pod {pod.key} is {pod.phase}", now))
            continue
        # Past its expiry with its pod alive: `leases.expiry` notices and then evicts the pod;
        # the lease holds its capacity until the pod is gone, as the card is still in use.
        if pod.phase == "Running" and lease.phase is not LeasePhase.ACTIVE:
            moves.append(_running(lease, acct, pod, now))
        elif pod.node and lease.phase is LeasePhase.RESERVED:
            moves.append(
                Move(lease, acct.bind(now), "PodBound", f"pod {pod.key} is bound to {pod.node}")
            )
        elif (
            not pod.node
            and lease.phase is LeasePhase.RESERVED
            and not pod.deleting
            and not pod.claim_pod  # its allocated claim still holds the bytes
            and reserved_timeout_s is not None
            and lease.start + reserved_timeout_s <= now
        ):
            sweep.append(lease)
    return LeasePlan(tuple(moves), tuple(collect), tuple(unsure), tuple(sweep))
