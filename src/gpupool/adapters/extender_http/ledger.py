"""One `NodeLedger` (gpupool.state.node_ledger: what bind knows of a node's leases) per node."""

from __future__ import annotations

from gpupool.state.node_ledger import NodeLedger

LEDGER_MAX_AGE_S = 10.0  # a node's ledger is re-listed from the API server at least this often


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
