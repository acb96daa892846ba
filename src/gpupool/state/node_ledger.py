"""What the extender's bind knows of one node's leases (`NodeLedger`), pure: times are passed in
by the caller (monotonic seconds), as everywhere in the core."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.state.lease import LeaseRecord


class NodeLedger:
    """What bind knows of one node's leases: its last consistent list from the API server plus
    every lease this extender created there since, or is creating now.

    Only the extender's bind creates leases, only the leader binds, and every bind on a node
    passes through its ledger under the node's lock, so the ledger never lacks a lease that holds
    capacity there: planning against it cannot double-book. It may hold more (a lease the
    controller released since the list): a plan that fails against a trusted ledger re-lists
    before giving up. A create whose outcome is unknown (an error other than AlreadyExists)
    keeps its lease here and expires the ledger: the next bind re-lists."""

    def __init__(self) -> None:
        self._leases: dict[str, LeaseRecord] = {}
        self._inflight: set[str] = set()
        self._listed_at: float | None = None

    def stale(self, max_age_s: float, now: float) -> bool:
        """Its last list is older than `max_age_s` at `now` (the caller's monotonic seconds)."""
        return self._listed_at is None or now - self._listed_at >= max_age_s

    def expire(self) -> None:
        self._listed_at = None

    def listing(self) -> frozenset[str]:
        """Call just before sending a list: the creates in flight, which it may miss."""
        return frozenset(self._inflight)

    def refresh(
        self, listed: Sequence[LeaseRecord], inflight_then: frozenset[str], now: float
    ) -> None:
        """Start again from a consistent list. A create in flight when the list was sent (it may
        have finished since, outside the node's lock) or in flight now may be missing from it:
        those are kept."""
        pending = {k: self._leases[k] for k in inflight_then | self._inflight if k in self._leases}
        self._leases = {x.key: x for x in listed}
        for key, lease in pending.items():
            self._leases.setdefault(key, lease)
        self._listed_at = now

    def leases(self) -> list[LeaseRecord]:
        return list(self._leases.values())

    def begin(self, lease: LeaseRecord) -> None:
        self._leases[lease.key] = lease
        self._inflight.add(lease.key)

    def commit(self, lease: LeaseRecord) -> None:
        self._inflight.discard(lease.key)
        self._leases[lease.key] = lease

    def abort(self, key: str, *, known: bool) -> None:
        """The create failed: `known` the lease was not made (dropped); else it may have been."""
        self._inflight.discard(key)
        if known:
            self._leases.pop(key, None)
        else:
            self.expire()

    def discard(self, key: str) -> None:
        self._inflight.discard(key)
        self._leases.pop(key, None)
