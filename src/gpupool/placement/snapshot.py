"""The cluster as flat numpy arrays: what placement reads and what assume/forget change.

Cards live in an (N nodes x G slots) grid so that filters and scorers are array expressions over
the whole cluster. Each card tracks free memory (bytes) and free compute (milli of its SMs); its
*free share* is the smaller of the two as a fraction of the card, in milli. Cards of models whose
memory size is unknown (the trace's G2/G3) carry 1000 abstract memory units, so share requests
work on them and byte requests are refused with a reason. Each card also has a share count (the
most pods it holds at once, the `gpupool.io/vgpu` devices the node's device plugin offers for it):
every placement on a card takes one of its shares, whatever its size.

Every change bumps the node's version, which lets scorers cache per-node results.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.domain.allocations import Allocation, Slice
from gpupool.domain.devices import Node
from gpupool.domain.errors import InvalidNode
from gpupool.domain.models import get_model
from gpupool.domain.requests import MILLI, Request

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNKNOWN_MEMORY_UNITS = MILLI
KINDS = 6  # no GPU, a slice, 1 whole GPU, 2, 4, 8 or more


def request_kind(req: Request) -> int:
    """Coarse class of a request, as GPU-clustering groups them."""
    if not req.wants_gpu:
        return 0
    if not req.whole_cards:
        return 1
    return {1: 2, 2: 3, 3: 4, 4: 4}.get(req.gpu_count, 5)


_snapshot_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Decision:
    """A placement: one node, and per chosen card the bytes and compute reserved."""

    request: Request
    node_index: int
    node: str
    cards: tuple[int, ...]  # slot positions on the node (not necessarily the GPU index)
    mem_bytes: tuple[int, ...]
    compute_milli: tuple[int, ...]
    offsets: tuple[int, ...]
    score: float

    def allocation(self, snapshot: ClusterSnapshot) -> Allocation:
        node = snapshot.nodes[self.node_index]
        slices = tuple(
            Slice(
                gpu_index=node.gpus[card].index,
                uuid=node.gpus[card].uuid,
                model=node.gpus[card].model,
                offset_bytes=offset,
                size_bytes=size,
                compute_milli=compute,
            )
            for card, size, compute, offset in zip(
                self.cards, self.mem_bytes, self.compute_milli, self.offsets, strict=True
            )
        )
        return Allocation(
            request=self.request.name,
            node=self.node,
            cpu_milli=self.request.cpu_milli,
            memory_mib=self.request.memory_mib,
            slices=slices,
        )


class ClusterSnapshot:
    """Mutable placement state of a set of nodes; `assume` and `forget` are exact inverses."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise InvalidNode(f"node names repeat: {', '.join(dupes[:5])}")
        self.uid = next(_snapshot_ids)
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.names: tuple[str, ...] = tuple(names)
        self.index: dict[str, int] = {name: i for i, name in enumerate(names)}
        n = len(nodes)
        g = max((node.gpu_count for node in nodes), default=0) or 1
        self.slots = g
        self.model_names: list[str] = []
        model_ids: dict[str, int] = {}

        self.cpu_cap = np.array([node.cpu_milli for node in nodes], dtype=np.int64)
        self.mem_cap = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.schedulable: BoolArray = np.array([node.schedulable for node in nodes], dtype=bool)
        self.condition: list[str | None] = [
            None if node.schedulable else "node is cordoned" for node in nodes
        ]
        # nodes whose cards another path (a device plugin, a DRA driver) also hands out, and the
        # agent's words for it (`set_other_path`): refused outright, whatever is free there
        self.other_path: BoolArray = np.zeros(len(nodes), dtype=bool)
        self.other_path_note: list[str | None] = [None] * len(nodes)
        self.gpu_count = np.array([node.gpu_count for node in nodes], dtype=np.int64)
        self.present: BoolArray = np.zeros((n, g), dtype=bool)
        self.healthy: BoolArray = np.zeros((n, g), dtype=bool)
        # cards a defragmentation round is clearing: they take no new slices (`set_cards_closed`)
        self.closed: BoolArray = np.zeros((n, g), dtype=bool)
        self.any_closed = False  # whether any card is closed (most of the time none is)
        self.closed_note: list[str | None] = [None] * n
        self.mem_known: BoolArray = np.zeros((n, g), dtype=bool)
        self.model_id: IntArray = np.full((n, g), -1, dtype=np.int64)
        self.gmem_total: IntArray = np.zeros((n, g), dtype=np.int64)
        self.numa: IntArray = np.zeros((n, g), dtype=np.int64)
        self.nvlink: IntArray = np.full((n, g), -1, dtype=np.int64)
        self.shares_total: IntArray = np.zeros((n, g), dtype=np.int64)
        for i, node in enumerate(nodes):
            for s, gpu in enumerate(node.gpus):
                model = get_model(gpu.model)
                if model.name not in model_ids:
                    model_ids[model.name] = len(self.model_names)
                    self.model_names.append(model.name)
                total = gpu.total_memory
                self.present[i, s] = True
                self.healthy[i, s] = gpu.healthy
                self.mem_known[i, s] = total is not None
                self.model_id[i, s] = model_ids[model.name]
                self.gmem_total[i, s] = total if total is not None else UNKNOWN_MEMORY_UNITS
                self.numa[i, s] = gpu.numa_node
                self.nvlink[i, s] = -1 if gpu.nvlink_domain is None else gpu.nvlink_domain
                self.shares_total[i, s] = gpu.shares
        self.model_ids = model_ids
        self.gmem_free: IntArray = self.gmem_total.copy()
        self.comp_free: IntArray = np.where(self.present, MILLI, 0).astype(np.int64)
        self.share_free: IntArray = self.comp_free.copy()
        self.shares_free: IntArray = self.shares_total.copy()  # pods a card may still take
        self.version: IntArray = np.zeros(n, dtype=np.int64)
        # How many placed requests of each kind a node holds (see `request_kind`).
        self.kind_count: IntArray = np.zeros((n, KINDS), dtype=np.int64)
        self._clock = 0
        # What filters derive from the parts of the nodes that only set_condition and
        # set_card_health change (models, sizes, health, cordons), per kind of request;
        # emptied by those two.
        self.static_memo: dict[tuple[object, ...], object] = {}
        # Reasons in words per node version and request size (filters.explain).
        self.explain_memo: dict[tuple[object, ...], str] = {}
        self.gpu_milli_total = int(self.present.sum()) * MILLI

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node]) -> ClusterSnapshot:
        return cls(nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    # ---- derived figures -------------------------------------------------------------------
    def total_gpu_milli(self) -> int:
        return self.gpu_milli_total

    def allocated_gpu_milli(self) -> int:
        """Allocated GPU capacity in milli-GPU (a card counts by its larger used dimension)."""
        return self.gpu_milli_total - int(self.share_free[self.present].sum())

    def fully_free(self) -> BoolArray:
        free = self.present & (self.comp_free == MILLI) & (self.gmem_free == self.gmem_total)
        return np.asarray(free, dtype=bool)

    # ---- change ----------------------------------------------------------------------------
    def _touch(self, i: int) -> None:
        self._clock += 1
        self.version[i] = self._clock
        row_total = np.maximum(self.gmem_total[i], 1)
        mem_share = self.gmem_free[i] * MILLI // row_total
        self.share_free[i] = np.where(self.present[i], np.minimum(self.comp_free[i], mem_share), 0)

    def assume(self, decision: Decision) -> None:
        """Reserve a decision's resources. Refuses (InvalidNode) rather than over-commit."""
        i = decision.node_index
        req = decision.request
        if self.cpu_free[i] < req.cpu_milli or self.mem_free[i] < req.memory_mib:
            raise InvalidNode(f"assume {req.name!r}: node {self.names[i]} lacks cpu or memory")
        for card, mem, comp in zip(
            decision.cards, decision.mem_bytes, decision.compute_milli, strict=True
        ):
            if self.gmem_free[i, card] < mem or self.comp_free[i, card] < comp:
                raise InvalidNode(
                    f"assume {req.name!r}: card {card} of {self.names[i]} lacks memory or compute"
                )
            if self.shares_free[i, card] < 1:
                raise InvalidNode(
                    f"assume {req.name!r}: card {card} of {self.names[i]} already holds its "
                    f"{int(self.shares_total[i, card])} pods (its share count)"
                )
        self.cpu_free[i] -= req.cpu_milli
        self.mem_free[i] -= req.memory_mib
        for card, mem, comp in zip(
            decision.cards, decision.mem_bytes, decision.compute_milli, strict=True
        ):
            self.gmem_free[i, card] -= mem
            self.comp_free[i, card] -= comp
            self.shares_free[i, card] -= 1
        self.kind_count[i, request_kind(req)] += 1
        self._touch(i)

    def forget(self, decision: Decision) -> None:
        """Release what `assume` reserved; the exact inverse."""
        i = decision.node_index
        req = decision.request
        self.cpu_free[i] += req.cpu_milli
        self.mem_free[i] += req.memory_mib
        for card, mem, comp in zip(
            decision.cards, decision.mem_bytes, decision.compute_milli, strict=True
        ):
            self.gmem_free[i, card] += mem
            self.comp_free[i, card] += comp
            self.shares_free[i, card] += 1
            if (
                self.gmem_free[i, card] > self.gmem_total[i, card]
                or self.comp_free[i, card] > MILLI
                or self.shares_free[i, card] > self.shares_total[i, card]
            ):
                raise InvalidNode(
                    f"forget {req.name!r}: card {card} of {self.names[i]} would exceed its capacity"
                )
        self.kind_count[i, request_kind(req)] -= 1
        self._touch(i)

    def set_condition(self, node: str, condition: str | None) -> None:
        """Mark a node unschedulable with a reason (cordoned, suspect, lost), or clear it."""
        i = self.index[node]
        self.condition[i] = condition
        self.schedulable[i] = condition is None
        self.static_memo.clear()
        self._clock += 1
        self.version[i] = self._clock

    def set_other_path(self, node: str, note: str | None) -> None:
        """Mark a node's cards as handed out by another path too (`note` says which and what
        to do), or clear it."""
        i = self.index[node]
        self.other_path[i] = note is not None
        self.other_path_note[i] = note
        self.static_memo.clear()
        self._clock += 1
        self.version[i] = self._clock

    def set_card_health(self, node: str, slot: int, healthy: bool) -> None:
        i = self.index[node]
        self.healthy[i, slot] = healthy
        self.static_memo.clear()
        self._clock += 1
        self.version[i] = self._clock

    def set_cards_closed(self, node: str, slots: Sequence[int], note: str | None) -> None:
        """Close these card slots of `node` to new slices, with the reason (`note`), and open
        the node's others; no slots: all open."""
        i = self.index[node]
        self.closed[i, :] = False
        for slot in slots:
            if 0 <= slot < self.slots:
                self.closed[i, slot] = True
        self.closed_note[i] = note if len(slots) else None
        self.any_closed = bool(self.closed.any())
        self._clock += 1
        self.version[i] = self._clock

    def state_key(self) -> tuple[bytes, ...]:
        """Everything assume/forget can change, for exact-restoration checks."""
        return (
            self.cpu_free.tobytes(),
            self.mem_free.tobytes(),
            self.gmem_free.tobytes(),
            self.comp_free.tobytes(),
            self.share_free.tobytes(),
            self.shares_free.tobytes(),
            self.kind_count.tobytes(),
        )
