"""Defragmentation in the replay: its settings, and what one round asks of the pure planner.

Every `interval_s` of replay time (from the first arrival to the last) the replay asks
`plan_defrag` for moves over its placement snapshot, with the common sizes learnt from the `RECENT`
most recent requests (every arrival, placed or still waiting: the large requests that fragmentation
keeps waiting are the ones that must count), and carries them out at once. A move is modelled as
the pod's restart: the moved pod leaves its card and re-enters at once at its new place — its lease
ends (metered) and a new one starts with the same quota standing, it does not queue, and its run
time starts over, as an evicted pod's does in this replay (the work it had done is lost; the replay
reports it as `defrag_restart_gpu_hours`). Trace pods are taken to have an owner that recreates
them, and no PodDisruptionBudgets; exclusive pods, pods under a reclaim notice and pods on a node
held for a reclaim are not moved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.domain.errors import GpupoolError
from gpupool.placement.defrag import (
    DefragPlan,
    DefragRules,
    InvalidDefragThreshold,
    Move,
    Resident,
    plan_defrag,
)
from gpupool.placement.fragmentation import CommonSizes
from gpupool.placement.snapshot import Decision
from gpupool.simulator.defaults import DEFAULT_INTERVAL_S
from gpupool.simulator.replay_leases import most_milli

if TYPE_CHECKING:
    from gpupool.simulator.replay import Engine

RECENT = 1000  # arrivals the common sizes are learnt from
FRAG_SAMPLES = 240  # fragmentation samples over the arrival window


class InvalidDefragInterval(GpupoolError):
    """A defragmentation interval is not a positive number of seconds."""


@dataclass(frozen=True, slots=True)
class ReplayDefrag:
    """`--defrag THRESHOLD[,INTERVAL]`: a round every `interval_s` seconds of replay time."""

    rules: DefragRules
    interval_s: float = DEFAULT_INTERVAL_S

    def __post_init__(self) -> None:
        t = self.interval_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise InvalidDefragInterval(
                f"the defragmentation interval is a positive number of seconds of replay time "
                f"(such as 300); got {t!r}"
            )

    @classmethod
    def parse(cls, text: str) -> ReplayDefrag:
        """`20` or `20,300`: threshold in percent, then the interval in seconds."""
        threshold_text, _, interval_text = str(text).partition(",")
        try:
            threshold = float(threshold_text)
        except ValueError:
            raise InvalidDefragThreshold(
                f"--defrag {text!r}: the threshold must be a percentage from 0 to 100 such as 20; "
                f"got {threshold_text.strip()!r}"
            ) from None
        rules = DefragRules(threshold_pct=threshold)
        if not interval_text.strip():
            if _:
                raise InvalidDefragInterval(
                    f"--defrag {text!r}: the interval after the comma is missing; "
                    f"write THRESHOLD or THRESHOLD,SECONDS such as 20,300"
                )
            return cls(rules)
        try:
            interval = float(interval_text)
        except ValueError:
            raise InvalidDefragInterval(
                f"--defrag {text!r}: the interval must be a number of seconds such as 300; "
                f"got {interval_text.strip()!r}"
            ) from None
        return cls(rules, interval)

    def round_times(self, start: float, end: float) -> list[float]:
        """The times of the rounds: every interval after `start`, up to `end`."""
        count = int((end - start) // self.interval_s)
        return [start + k * self.interval_s for k in range(1, count + 1)]


def movable(
    running: Iterable[tuple[str, Decision, int, bool]],
    noticed: Iterable[str],
    held_nodes: Iterable[int],
) -> list[Resident]:
    """The replay's running slices as the planner's residents: (lease id, placement, priority,
    exclusive), less those under a reclaim notice and those on a held node."""
    skip, held = set(noticed), set(held_nodes)
    return [
        Resident(lease_id, decision, priority, exclusive=exclusive)
        for lease_id, decision, priority, exclusive in running
        if lease_id not in skip and decision.node_index not in held and decision.cards
    ]


def plan_round(engine: Engine, rules: DefragRules) -> DefragPlan:
    """The planner's moves over the engine's state now (the snapshot is left as it is)."""
    residents = movable(
        (
            (key, run.decision, run.job.request.priority, run.job.request.exclusive)
            for key, run in engine.running.items()
        ),
        engine.notices.keys(),
        engine.room.nodes(),
    )
    return plan_defrag(engine.snap, residents, CommonSizes.learn(engine.recent), rules)


def defrag_round(engine: Engine, freed: set[int]) -> None:
    """Plan a round over the snapshot and carry its moves out now."""
    assert engine.defrag is not None
    plan = plan_round(engine, engine.defrag.rules)
    engine.stats.defrag_rounds += 1
    for move in plan.moves:
        carry_out(engine, move, freed)


def carry_out(engine: Engine, move: Move, freed: set[int]) -> None:
    """The moved pod leaves and re-enters at once at its new place: its lease ends, a new one
    starts there with the same quota standing, and its run time starts over."""
    key = move.resident
    run = engine.running[key]
    live = engine.ledger.lease(key) or run.lease
    engine.end(key, "release", freed)
    engine.requested_milli += run.job.share_milli  # still asked for: it re-enters at once
    started = live.active_at if live.active_at is not None else live.reserved_at
    engine.stats.moved(run.job.share_milli * max(0.0, engine.now - started))
    # Re-admitted as admission would admit it (the most it may hold): a move to a smaller card
    # may charge a byte slice more milli-GPU than its old card did.
    admitted = max(live.amount, most_milli(engine.snap, run.job.request))
    engine.start(run.job, move.target, admitted, live.borrowed, live.preemptible)
