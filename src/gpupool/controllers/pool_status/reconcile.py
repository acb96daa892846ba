"""GpuPool status, written: the pure `plan.pool_status` over the round's cards, patched onto
each GpuPool when it changed (a merge patch of the controller's fields; the `CardsFragmented`
condition replaces only itself among the conditions, so another writer's stay).

Runs after the admission round and the /metrics reading (`controllers.observe`), over the same
cards, so `kubectl get gpupool` and Prometheus show one set of numbers. A GpuPool whose spec
cannot be read gets a `CardsFragmented` condition of status Unknown saying why. Given the loop's
`Containment`, one GpuPool whose status fails (its plan or its write) is set aside with a
ReconcileFailed event and the other pools go on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from gpupool.adapters.metrics.controller import CardReading
from gpupool.controllers.contain import Containment, run_one
from gpupool.controllers.pool_status.plan import CONDITION, PoolCard, PoolStatus, pool_status
from gpupool.domain.units import format_bytes
from gpupool.ports import Json, PoolStatusApi
from gpupool.rfc3339 import format_time
from gpupool.state.listed import ObjectReference, Unreadable
from gpupool.state.pool import PoolObject

log = logging.getLogger("gpupool.controller.pools")


def status_json(status: PoolStatus) -> Json:
    """The controller's status fields (without the conditions)."""
    return {
        "observedGeneration": status.generation,
        "nodes": status.nodes,
        "gpus": status.gpus,
        "capacity": format_bytes(status.capacity_bytes),
        "capacityBytes": status.capacity_bytes,
        "allocated": format_bytes(status.allocated_bytes),
        "allocatedBytes": status.allocated_bytes,
        "fragmentation": f"{100 * status.fragmentation:.1f}%",
        "cardsOverThreshold": len(status.over),
    }


def condition_json(
    state: str, reason: str, message: str, generation: int, stamp: str, old: Json | None
) -> Json:
    """The condition; its lastTransitionTime moves only when its status does."""
    same = old is not None and old.get("status") == state
    return {
        "type": CONDITION,
        "status": state,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": str(old.get("lastTransitionTime")) if same and old else stamp,
        "observedGeneration": generation,
    }


def _changed(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return any(current.get(k) != v for k, v in wanted.items())


class PoolStatusReconciler:
    def __init__(self, api: PoolStatusApi, contain: Containment | None = None) -> None:
        self.api = api
        self.contain = contain

    async def reconcile(self, cards: Sequence[CardReading], now: float) -> tuple[PoolStatus, ...]:
        pools = await self.api.gpu_pools()
        if not pools.read and not pools.unreadable:
            return ()
        # a Node that does not decode is left out (the admission loop sets it aside)
        labels = {node.name: node.labels for node in (await self.api.nodes()).values}
        pool_cards = [
            PoolCard(c.node, c.gpu, c.uuid, c.model, c.total_bytes, c.allocated_bytes,
                     c.fragmentation)
            for c in cards
        ]  # fmt: skip
        stamp = format_time(now)
        done: list[PoolStatus] = []

        async def one(pool: PoolObject, ref: ObjectReference) -> None:
            current = pools.stored.get(ref.key) or {}
            conditions = [c for c in current.get("conditions") or () if isinstance(c, dict)]
            old = next((c for c in conditions if c.get("type") == CONDITION), None)
            others = [c for c in conditions if c.get("type") != CONDITION]
            name = pool.name
            if pool.problem is not None:
                wanted: Json = {}
                cond = condition_json(
                    "Unknown", "InvalidSpec", pool.problem, pool.generation, stamp, old
                )
            else:
                status = pool_status(pool, pool_cards, labels)
                done.append(status)
                wanted = status_json(status)
                state = "True" if status.condition_true else "False"
                cond = condition_json(
                    state, status.reason, status.message, status.generation, stamp, old
                )
            if not _changed(current, wanted) and old is not None and not _changed(old, cond):
                return
            patch = {**wanted, "conditions": [*others, cond]}
            written = await self.api.patch_gpu_pool_status(name, patch)
            if written and cond["status"] != (old or {}).get("status"):
                log.info("GpuPool %s: %s %s: %s", name, CONDITION, cond["status"], cond["message"])

        try:
            for bad in pools.unreadable:  # read_pool raised: this pool is set aside
                await run_one(self.contain, "pool-status", bad.ref, partial(_raise, bad), now)
            for pool, ref in pools.read:
                await run_one(self.contain, "pool-status", ref, partial(one, pool, ref), now)
        finally:
            if self.contain is not None:
                await self.contain.report(now)
        return tuple(done)


async def _raise(bad: Unreadable) -> None:
    raise bad.error
