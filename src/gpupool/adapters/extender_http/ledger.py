"""One `NodeLedger` (gpupool.state.node_ledger: what bind knows of a node's leases) per node, and
whether the bound pods must be read again.

The bind writes a pod's GpuLease after its Binding (lease_writer.py), so a pod may hold slices by
its `gpupool.io/allocation` alone for a moment; and a pod bound by another replica (a leader that
died since) or before this process started may still be in that moment. So the first list of
leases after start, after an election (`forget`) or after a write whose outcome is unknown also
reads the bound pods, once for all nodes (`pods_due`), and their allocations without a lease are
held.
"""

from __future__ import annotations

from gpupool.state.node_ledger import NodeLedger

LEDGER_MAX_AGE_S = 10.0  # a node's ledger is re-listed from the API server at least this often


class Ledgers:
    """The ledger of every node bind has touched."""

    def __init__(self) -> None:
        self._by_node: dict[str, NodeLedger] = {}
        self._pods_due = True  # the bound pods are to be read with the next list

    def __getitem__(self, node: str) -> NodeLedger:
        ledger = self._by_node.get(node)
        if ledger is None:
            ledger = self._by_node[node] = NodeLedger()
        return ledger

    def pods_due(self) -> bool:
        """The bound pods must be read with the next list (see the module docstring)."""
        return self._pods_due

    def pods_read(self) -> None:
        self._pods_due = False

    def unsure(self, node: str) -> None:
        """A write on `node` may or may not have landed: re-list it, and read the pods."""
        self[node].expire()
        self._pods_due = True

    def forget(self) -> None:
        """Trust nothing known about leases: each node's next bind re-lists it, and reads its
        bound pods (a new leader)."""
        for ledger in self._by_node.values():
            ledger.expire()
        self._pods_due = True
