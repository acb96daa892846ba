"""A GpuPool, decoded once (`adapters.kubernetes.pool`) for the two loops that read it: which
cards it covers (its node selector and models) and its fragmentation threshold, for its status
(`controllers.pool_status`); and its defragmentation settings (`spec.defrag`), for the
defragmentation loop (`controllers.defrag`). What cannot be read is kept as a problem, each
loop reporting the ones that concern it as a condition on the GpuPool."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError

DEFAULT_THRESHOLD_PCT = 30


class InvalidPoolSpec(GpupoolError):
    """A GpuPool's settings cannot be used (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class PoolDefrag:
    """`interval_s`: a new round at most this often; `notice_s`: the buffer time between a pod's
    notice and its eviction; `timeout_s`: a round's marks end by then even if its cards are not
    cleared; `max_moves`: bound per round (None: none); `move_orphans`: also pods no owner
    recreates. The threshold is the pool's own (`PoolObject.threshold_pct`)."""

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
    models: tuple[str, ...] = ()  # empty: every model
    threshold_pct: int = DEFAULT_THRESHOLD_PCT  # spec.defragThresholdPercent
    # Why the selector, models or threshold cannot be read: the pool covers nothing, both loops
    # report it.
    problem: str | None = None
    defrag: PoolDefrag | None = None  # None: defragmentation off (or `defrag_problem`)
    defrag_problem: str | None = None  # why spec.defrag cannot be used: nothing is moved
    last_round: float | None = None  # status.defrag.lastRound: when the last round was planned

    def covers_node(self, labels: Mapping[str, str]) -> bool:
        return self.problem is None and all(labels.get(k) == v for k, v in self.node_selector)

    def covers(self, labels: Mapping[str, str], model: str) -> bool:
        """Whether a card of `model` on a node with these labels is the pool's."""
        return (not self.models or model in self.models) and self.covers_node(labels)

    @property
    def any_problem(self) -> str | None:
        """What keeps the pool from defragmenting, if anything."""
        return self.problem or self.defrag_problem
