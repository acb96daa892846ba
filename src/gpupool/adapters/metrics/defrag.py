"""The defragmentation loop's series on the controller's /metrics: what moved and why.

- `gpupool_controller_defrag_rounds_total{pool}`: rounds planned;
- `gpupool_controller_defrag_moves_total{pool, outcome}`: pods noticed to move (`noticed`),
  evicted (`evicted`), refused by the Eviction API (`blocked`: a PodDisruptionBudget), notices
  withdrawn when a round ended (`withdrawn`);
- `gpupool_controller_defrag_marked_cards{pool}`: cards closed to new slices now;
- `gpupool_controller_defrag_released_total{pool, why}`: marks released (`cleared`, `timeout`,
  `disabled`).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge


class DefragMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = Counter(
            "gpupool_controller_defrag_rounds",
            "Defragmentation rounds planned",
            ["pool"],
            registry=registry,
        )
        self.moves = Counter(
            "gpupool_controller_defrag_moves",
            "Pods a defragmentation round moves, by outcome (noticed, evicted, blocked, withdrawn)",
            ["pool", "outcome"],
            registry=registry,
        )
        self.released = Counter(
            "gpupool_controller_defrag_released",
            "Defragmentation marks released, by why (cleared, timeout, disabled)",
            ["pool", "why"],
            registry=registry,
        )
        self.marked = Gauge(
            "gpupool_controller_defrag_marked_cards",
            "Cards a defragmentation round closed to new slices now",
            ["pool"],
            registry=registry,
        )

    def round(self, pool: str) -> None:
        self.rounds.labels(pool).inc()

    def move(self, pool: str, outcome: str) -> None:
        self.moves.labels(pool, outcome).inc()

    def release(self, pool: str, why: str) -> None:
        self.released.labels(pool, why).inc()

    def marked_cards(self, counts: Mapping[str, int]) -> None:
        for pool, count in counts.items():
            self.marked.labels(pool).set(count)
