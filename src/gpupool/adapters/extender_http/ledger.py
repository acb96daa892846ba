"""What bind knows of each node's leases (`NodeLedger`), one per node (`Ledgers`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gpupool.adapters.kubernetes.lease import LeaseRecord

LEDGER_MAX_AGE_S = 10.0  # a node's ledger is re-listed from the API server at least this often


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

    def stale(self, max_age_s: float) -> bool:
        return self._listed_at is None or time.monotonic() - self._listed_at >= max_age_s

    def expire(self) -> None:
        self._listed_at = None

    def listing(self) -> frozenset[str]:
        """Call just before sending a list: the creates in flight, which it may miss."""
        return frozenset(self._inflight)

    def refresh(self, listed: Sequence[LeaseRecord], inflight_then: frozenset[str]) -> None:
        """Start again from a consistent list. A create in flight when the list was sent (it may
        have finished since, outside the node's lock) or in flight now may be missing from it:
        those are kept."""
        pending = {k: self._leases[k] for k in inflight_then | self._inflight if k in self._leases}
        self._leases = {x.key: x for x in listed}
        for key, lease in pending.items():
            self._leases.setdefault(key, lease)
        self._listed_at = time.monotonic()

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


class Ledgers:
    """The ledger of every node bind has touched."""

    def __init__(self) -> None:
        self._by_node: dict[str, NodeLedger] = {}

    def __getitem__(self, node: str) -> NodeLedger:
        ledger = self._by_node.get(node)
        if ledger is None:
            ledger = self._by_node[node] = NodeLedger()
        return ledger

    def forget(self) -> None:
        """Trust nothing known about leases: each node's next bind re-lists it (a new leader)."""
        for ledger in self._by_node.values():
            ledger.expire()
