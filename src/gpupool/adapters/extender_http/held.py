"""A planned lease counted in memory before the API server has it (`hold`), and its two ends:
`commit` (the API server's copy replaces it) and `release` (it was not made, or is given back).

Reserve holds the lease it is about to create; a gang's first bound member holds its others'
room (gang_bind). Each works on the cache and the node's ledger it is given, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.adapters.extender_http.ledger import Ledgers
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord


@dataclass(frozen=True, slots=True)
class Held:
    """A planned lease counted in memory, and what the cache held under its key before (the
    pod's lease on another node, which a create Conflict will reveal)."""

    lease: LeaseRecord
    replaced: LeaseRecord | None


def hold(cache: ClusterCache, ledgers: Ledgers, lease: LeaseRecord) -> Held:
    """The planned lease, counted on its node before the API server has it."""
    replaced = cache.leases.get(lease.key)
    ledgers[lease.node].begin(lease)
    cache.set_lease(lease)
    return Held(lease, replaced)


def release(cache: ClusterCache, ledgers: Ledgers, held: Held, *, known: bool) -> None:
    """Undo `hold`, leaving the cache as it was: `known` the lease was not made (dropped from
    the ledger); else it may have been, and the node's ledger re-lists before it is trusted
    again."""
    ledgers[held.lease.node].abort(held.lease.key, known=known)
    if held.replaced is None:
        cache.delete_lease(held.lease.key)
    else:
        cache.set_lease(held.replaced)


def commit(cache: ClusterCache, ledgers: Ledgers, lease: LeaseRecord) -> None:
    """The API server's copy of the created lease replaces the held one."""
    ledgers[lease.node].commit(lease)
    cache.set_lease(lease)
