"""A GpuPool's status from the cluster's cards, pure: which cards the pool covers (its node
selector and models), their memory, what live leases take of it, the pool's fragmentation and
the cards whose fragmentation is over the pool's threshold, with a condition saying so.

The cards come as the controller's /metrics shows them (`controllers.observe.card_readings`:
the snapshot the extender and reclaim use, and FGD's measure per card over the common requests
of the GPU pods the controller sees), so `kubectl get gpupool` and Prometheus say the same.

Fragmentation of a card is the share of the card's memory that is free but that no common
request can use (0..1); of the pool, those fragment bytes summed ÷ the pool's free bytes (the
CRD's "share of free GPU"; 0 when nothing is free). A card is over the threshold when its
fragmentation is above `spec.defragThresholdPercent` (30% by default) of its memory, the rule
the GpupoolCardFragmented alert and the defragmentation loop use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.state.pool import PoolObject

CONDITION = "CardsFragmented"
LISTED_CARDS = 10  # cards named in the condition's message; the count says the rest


@dataclass(frozen=True, slots=True)
class PoolCard:
    node: str
    gpu: int
    uuid: str
    model: str
    total_bytes: int
    allocated_bytes: int
    fragmentation: float  # 0..1 of the card's memory


@dataclass(frozen=True, slots=True)
class PoolStatus:
    pool: str
    generation: int
    nodes: int
    gpus: int
    capacity_bytes: int
    allocated_bytes: int
    fragmentation: float  # fragment bytes ÷ free bytes, 0..1
    over: tuple[PoolCard, ...]  # cards over the threshold, most fragmented first
    threshold_pct: int

    @property
    def condition_true(self) -> bool:
        return bool(self.over)

    @property
    def reason(self) -> str:
        return "CardsOverThreshold" if self.over else "NoCardOverThreshold"

    @property
    def message(self) -> str:
        if not self.over:
            return (
                f"no card of the pool is more than {self.threshold_pct}% fragmented "
                f"(pool: {100 * self.fragmentation:.1f}% of free memory)"
            )
        named = ", ".join(
            f"{c.node}/{c.gpu} {100 * c.fragmentation:.1f}%" for c in self.over[:LISTED_CARDS]
        )
        more = len(self.over) - LISTED_CARDS
        rest = f" and {more} more" if more > 0 else ""
        return (
            f"{len(self.over)} card(s) more than {self.threshold_pct}% fragmented (free memory "
            f"no common request can use, as a share of the card): {named}{rest}"
        )


def pool_status(
    pool: PoolObject, cards: Iterable[PoolCard], labels: Mapping[str, Mapping[str, str]]
) -> PoolStatus:
    """`labels`: each node's labels by name (a card on a node not listed is not covered)."""
    mine = [c for c in cards if c.node in labels and pool.covers(labels[c.node], c.model)]
    capacity = sum(c.total_bytes for c in mine)
    allocated = sum(c.allocated_bytes for c in mine)
    free = sum(max(0, c.total_bytes - c.allocated_bytes) for c in mine)
    fragment = sum(c.fragmentation * c.total_bytes for c in mine)
    limit = pool.threshold_pct / 100.0
    over = sorted(
        (c for c in mine if c.fragmentation > limit),
        key=lambda c: (-c.fragmentation, c.node, c.gpu),
    )
    return PoolStatus(
        pool=pool.name,
        generation=pool.generation,
        nodes=len({c.node for c in mine}),
        gpus=len(mine),
        capacity_bytes=capacity,
        allocated_bytes=allocated,
        fragmentation=min(1.0, fragment / free) if free > 0 else 0.0,
        over=tuple(over),
        threshold_pct=pool.threshold_pct,
    )


def plan_pool_statuses(
    pools: Sequence[PoolObject],
    cards: Sequence[PoolCard],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[PoolStatus, ...]:
    return tuple(pool_status(p, cards, labels) for p in pools)
