"""A GpuPool as the defragmentation loop reads it (decoded once, `adapters.kubernetes.pool`):
which nodes and models it covers, and its defragmentation settings (`spec.defrag`, the threshold
`spec.defragThresholdPercent`), or the problem that keeps it from defragmenting."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError
from gpupool.state.nodes import NodeObject


class InvalidPoolSpec(GpupoolError):
    """A GpuPool's defragmentation settings cannot be used (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class PoolDefrag:
    """`threshold_pct`: cards whose fragmentation is above it are cleared; `interval_s`: a new
    round at most this often; `notice_s`: the buffer time between a pod's notice and its
    eviction; `timeout_s`: a round's marks end by then even if its cards are not cleared;
    `max_moves`: bound per round (None: none); `move_orphans`: also pods no owner recreates."""

    threshold_pct: int
    interval_s: float = 300.0
    notice_s: float = 60.0
    timeout_s: float = 900.0
    max_moves: int | None = None
    move_orphans: bool = False


@dataclass(frozen=True, slots=True)
class PoolObject:
    name: str
    generation: int
    node_selector: tuple[tuple[str, str], ...] = ()
    models: tuple[str, ...] = ()
    defrag: PoolDefrag | None = None  # None: defragmentation off (or `problem`)
    problem: str | None = None  # why the settings cannot be used: nothing is moved
    last_round: float | None = None  # status.defrag.lastRound: when the last round was planned

    def covers(self, node: NodeObject) -> bool:
        return all(node.labels.get(k) == v for k, v in self.node_selector)
