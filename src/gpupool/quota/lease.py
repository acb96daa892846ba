"""A lease: one pod's hold on a slice of the pool, as a pure state machine.

    reserved ──► bound ──► active ──► released | expired | lost | reclaimed
        │          │                    ▲
        └──────────┴────────────────────┘  (a reservation or binding can end early too)

Times are float seconds passed in by the caller (the core has no clock). Usage is metered from
the reservation (the capacity is held from then on) to the end. A lease with a time-to-live
expires at `expires_at` unless renewed. Every transition returns a new Lease; an illegal one raises
IllegalLeaseTransition.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import MILLI
from gpupool.domain.units import GiB


class IllegalLeaseTransition(GpupoolError):
    """A lease was asked to move to a phase it cannot reach from where it is."""


class LeasePhase(Enum):
    RESERVED = "reserved"
    BOUND = "bound"
    ACTIVE = "active"
    RELEASED = "released"
    EXPIRED = "expired"
    LOST = "lost"
    RECLAIMED = "reclaimed"

    def __init__(self, value: str) -> None:
        # a plain attribute: asked of every lease several times a round, and an enum member's
        # hash is a Python call
        self.terminal = value in ("released", "expired", "lost", "reclaimed")


_TERMINAL = frozenset(p for p in LeasePhase if p.terminal)
_ENDINGS = frozenset(_TERMINAL)
ALLOWED: dict[LeasePhase, frozenset[LeasePhase]] = {
    LeasePhase.RESERVED: frozenset({LeasePhase.BOUND} | _ENDINGS),
    LeasePhase.BOUND: frozenset({LeasePhase.ACTIVE} | _ENDINGS),
    LeasePhase.ACTIVE: frozenset(_ENDINGS),
    LeasePhase.RELEASED: frozenset(),
    LeasePhase.EXPIRED: frozenset(),
    LeasePhase.LOST: frozenset(),
    LeasePhase.RECLAIMED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Lease:
    """`amount` is in the tenant's quota resource; `borrowed` marks capacity taken from the cohort
    beyond nominal, `preemptible` work admitted after the budget ran out: both may be reclaimed."""

    id: str
    tenant: str
    amount: int
    reserved_at: float
    priority: int = 0
    compute_milli: int = 0
    gpu_memory_bytes: int = 0  # over all GPUs; 0 when unknown (metering then has no GiB-hours)
    gpu_milli: int = 0  # over all GPUs
    borrowed: bool = False
    preemptible: bool = False
    exclusive: bool = False
    gang: str | None = None  # the gang it belongs to (`namespace/name`): reclaimed as a whole
    phase: LeasePhase = LeasePhase.RESERVED
    bound_at: float | None = None
    active_at: float | None = None
    ended_at: float | None = None
    ttl_s: float | None = None
    expires_at: float | None = None

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise IllegalLeaseTransition(
                f"lease {self.id}: amount must be 0 or more; got {self.amount}"
            )
        if self.ttl_s is not None:
            if not self.ttl_s > 0:
                raise IllegalLeaseTransition(
                    f"lease {self.id}: TTL must be positive; got {self.ttl_s}"
                )
            if self.expires_at is None:
                object.__setattr__(self, "expires_at", self.reserved_at + self.ttl_s)

    @property
    def reclaimable(self) -> bool:
        return (
            (self.borrowed or self.preemptible) and not self.exclusive and not self.phase.terminal
        )

    @property
    def live(self) -> bool:
        return not self.phase.terminal

    def _move(self, to: LeasePhase, now: float, **changes: object) -> Lease:
        if to not in ALLOWED[self.phase]:
            raise IllegalLeaseTransition(
                f"lease {self.id}: cannot go from {self.phase.value} to {to.value}"
            )
        if now < self.reserved_at:
            raise IllegalLeaseTransition(
                f"lease {self.id}: time {now} is before its reservation at {self.reserved_at}"
            )
        return replace(self, phase=to, **changes)  # type: ignore[arg-type]

    def bind(self, now: float) -> Lease:
        return self._move(LeasePhase.BOUND, now, bound_at=now)

    def activate(self, now: float) -> Lease:
        return self._move(LeasePhase.ACTIVE, now, active_at=now)

    def release(self, now: float) -> Lease:
        return self._move(LeasePhase.RELEASED, now, ended_at=now)

    def lose(self, now: float) -> Lease:
        return self._move(LeasePhase.LOST, now, ended_at=now)

    def reclaim(self, now: float) -> Lease:
        if not self.reclaimable:
            raise IllegalLeaseTransition(
                f"lease {self.id}: only borrowed or preemptible leases can be reclaimed"
            )
        return self._move(LeasePhase.RECLAIMED, now, ended_at=now)

    def expire(self, now: float, *, held_until: float | None = None) -> Lease:
        """Metered to the expiry, or to `held_until` (no earlier) when the pod kept the capacity
        past it: the live system evicts only after a notice and a grace period."""
        if self.expires_at is None or now < self.expires_at:
            raise IllegalLeaseTransition(
                f"lease {self.id}: cannot expire at {now}; it expires at {self.expires_at}"
            )
        end = self.expires_at if held_until is None else max(self.expires_at, held_until)
        return self._move(LeasePhase.EXPIRED, now, ended_at=end)

    def is_due(self, now: float) -> bool:
        """True when the lease has outlived its TTL and should be expired."""
        return self.live and self.expires_at is not None and now >= self.expires_at

    def renew(self, now: float) -> Lease:
        if self.phase.terminal:
            raise IllegalLeaseTransition(
                f"lease {self.id}: cannot renew a {self.phase.value} lease"
            )
        if self.ttl_s is None:
            raise IllegalLeaseTransition(f"lease {self.id}: has no TTL to renew")
        if self.is_due(now):
            raise IllegalLeaseTransition(
                f"lease {self.id}: expired at {self.expires_at}, renewal at {now} is too late"
            )
        return replace(self, expires_at=now + self.ttl_s)

    def held_seconds(self, now: float) -> float:
        end = self.ended_at if self.ended_at is not None else now
        return max(0.0, end - self.reserved_at)

    def gib_hours(self, now: float) -> float:
        return self.gpu_memory_bytes / GiB * self.held_seconds(now) / 3600.0

    def gpu_hours(self, now: float) -> float:
        return self.gpu_milli / MILLI * self.held_seconds(now) / 3600.0
