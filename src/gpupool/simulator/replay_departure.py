"""Departures and evictions in the replay: a lease ends (`Engine.end`), released when its pod's
run time is over, reclaimed when its notice's grace period is (the evicted pod queues again and
restarts from scratch). The ended lease is metered and its node noted as freed for the round
(`Engine.run` then retries what waits).

Each step takes the replay's `Engine` (`replay.Engine`) and works on its state."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpupool.simulator.replay import Engine


def depart(engine: Engine, key: str, freed: set[int]) -> None:
    """The pod under lease `key` ran its time: its lease is released (a notice on it is moot)."""
    engine.notices.pop(key, None)
    engine.end(key, "release", freed)


def evict(engine: Engine, key: str, freed: set[int]) -> None:
    """The notice on lease `key` is due: its pod is evicted and queues again (unless the notice
    was withdrawn, or the lease is no longer reclaimable)."""
    if engine.notices.pop(key, None) is None:
        return
    run = engine.end(key, "reclaim", freed)
    if run is None:
        return
    engine.stats.reclaims += 1
    if engine.room.evicted(key):
        engine.stats.room_reclaims += 1
    engine.enqueue(run.job)  # a gang's members come back together (reclaim takes all)
    # the evicted pod restarts from scratch: its whole run time is ahead of it again
