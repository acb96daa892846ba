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
from collections.abc import Sequence
from functools import partial

from gpupool.adapters.metrics.controller import CardReading
from gpupool.controllers.contain import Containment, run_one
from gpupool.controllers.pool_status.plan import CONDITION, PoolCard, PoolStatus, pool_status
from gpupool.domain.units import format_bytes
from gpupool.ports import PoolStatusApi
from gpupool.rfc3339 import format_time
from gpupool.state.listed import ObjectReference, Unreadable
from gpupool.state.pool import PoolObject
from gpupool.state.status_writes import Condition, PoolFields, PoolStatusWrite

log = logging.getLogger("gpupool.controller.pools")


def pool_fields(status: PoolStatus) -> PoolFields:
    """The controller's status fields (without the conditions)."""
    return PoolFields(
        observed_generation=status.generation,
        nodes=status.nodes,
        gpus=status.gpus,
        capacity=format_bytes(status.capacity_bytes),
        capacity_bytes=status.capacity_bytes,
        allocated=format_bytes(status.allocated_bytes),
        allocated_bytes=status.allocated_bytes,
        fragmentation=f"{100 * status.fragmentation:.1f}%",
        cards_over_threshold=len(status.over),
    )


def pool_condition(
    state: str, reason: str, message: str, generation: int, stamp: str, old: Condition | None
) -> Condition:
    """The condition; its lastTransitionTime moves only when its status does."""
    same = old is not None and old.status == state and old.last_transition_time is not None
    return Condition(
        type=CONDITION,
        status=state,
        reason=reason,
        message=message[:1024],
        last_transition_time=old.last_transition_time if same and old else stamp,
        observed_generation=generation,
    )


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
            current = pools.status_of(ref.key)
            old = current.condition(CONDITION)
            name = pool.name
            wanted: PoolFields | None = None
            if pool.problem is not None:
                cond = pool_condition(
                    "Unknown", "InvalidSpec", pool.problem, pool.generation, stamp, old
                )
            else:
                status = pool_status(pool, pool_cards, labels)
                done.append(status)
                wanted = pool_fields(status)
                state = "True" if status.condition_true else "False"
                cond = pool_condition(
                    state, status.reason, status.message, status.generation, stamp, old
                )
            if (wanted is None or current.pool == wanted) and old == cond:
                return
            write = PoolStatusWrite(wanted, (*current.others(CONDITION), cond))
            written = await self.api.patch_gpu_pool_status(name, write)
            if written and (old is None or cond.status != old.status):
                log.info("GpuPool %s: %s %s: %s", name, CONDITION, cond.status, cond.message)

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
