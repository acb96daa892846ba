"""The bound pod's GpuLease, created after its Binding and off the bind's critical path.

The Binding carries the pod's `gpupool.io/allocation` and `gpupool.io/lease` onto the pod with
its nodeName in one write, so from that moment the pod itself is a durable record of the slices
it holds: the controller's restore makes a missing lease again from it, an extender that starts
or is elected reads it (`ledger.pods_due`), and the cache holds it on a lease's deletion. What
the GpuLease adds (the record the agent's Allocate and the controllers work from, the quota
charge) can come a moment later. So the bind answers kube-scheduler once the Binding stands and
`LeaseWriter.submit` creates the lease in the background:

- until the create is answered, the lease stays held in the node's ledger (in flight: a re-list
  keeps it) and in the cache, as `reserve.hold` left it, so later binds plan around it;
- created: the API server's copy replaces it (`held.commit`);
- AlreadyExists: the controller's restore made it first from the pod's allocation (the same
  slices): that copy is the lease; any other lease under the pod's name is reported and kept;
- any other error is retried (ATTEMPTS, with a growing pause); a lost lead, or retries spent,
  ends the try: the allocation stays held in the cache as an orphan (`hold_unleased`) and the
  controller's restore makes the lease from the pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gpupool.adapters.extender_http.held import commit
from gpupool.adapters.kubernetes.errors import Conflict
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.state.lease import LeaseRecord

if TYPE_CHECKING:
    from gpupool.adapters.extender_http.bind_context import BindContext

log = logging.getLogger(__name__)

ATTEMPTS = 6
FIRST_PAUSE_S = 0.2  # doubled after each failed attempt: 0.2 + 0.4 + ... ~ 6 s in all
MAX_CREATES = 16  # creates in flight at once: the rest wait their turn (in memory, held), so a
# burst of binds does not become a burst of writes competing with the Bindings themselves


class LeaseWriter:
    """Creates bound pods' leases in the background; `drain` waits for those in flight."""

    def __init__(
        self,
        attempts: int = ATTEMPTS,
        first_pause_s: float = FIRST_PAUSE_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_creates: int = MAX_CREATES,
    ) -> None:
        self.attempts = attempts
        self.first_pause_s = first_pause_s
        self.sleep = sleep
        self.max_creates = max_creates
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None  # of the loop that submits
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, ctx: BindContext, lease: LeaseRecord) -> None:
        """Create `lease` (held by `reserve.hold`; its pod's Binding stands) in the background."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._slots, self._loop = asyncio.Semaphore(self.max_creates), loop
        task = asyncio.ensure_future(self._write(ctx, lease, self._slots, time.perf_counter()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every create in flight (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _write(
        self, ctx: BindContext, lease: LeaseRecord, slots: asyncio.Semaphore, since: float
    ) -> None:
        async with slots:
            await self._attempts(ctx, lease, since)

    async def _attempts(self, ctx: BindContext, lease: LeaseRecord, since: float) -> None:
        """Create `lease`; the `create_lease` step's time is from the Binding (`since`) on."""
        pause = self.first_pause_s
        for attempt in range(1, self.attempts + 1):
            try:
                made = await create_once(ctx, lease)
            except NotLeader as err:
                give_up(ctx, lease, str(err))
                return
            except Exception as err:
                if attempt == self.attempts:
                    give_up(ctx, lease, f"{self.attempts} attempts failed, the last: {err}")
                    return
                log.warning("GpuLease %s: create failed (%s); trying again", lease.key, err)
                await self.sleep(pause)
                pause *= 2
                continue
            if made is not None:
                commit(ctx.cache, ctx.ledgers, made)
            else:
                give_up(ctx, lease, "another lease stands under its name")
            ctx.timer.done("create_lease", since)
            return


async def create_once(ctx: BindContext, lease: LeaseRecord) -> LeaseRecord | None:
    """The lease as the API server holds it after one create: ours, or the same slices made
    first by the controller's restore; None when another lease of the pod's name stands."""
    try:
        return await ctx.api.create_lease(lease)
    except Conflict:
        existing = await ctx.api.get_lease(lease.namespace, lease.name)
        if existing is None:
            raise  # deleted since: the next attempt creates it
        if existing.node == lease.node and existing.slices == lease.slices:
            return existing
        log.error(
            "GpuLease %s: the pod is bound to %s holding %s, but a lease of its name says %s "
            "on %s; the pod's allocation stays held, the controller reconciles the lease",
            lease.key, lease.node, lease.slices, existing.slices, existing.node,
        )  # fmt: skip
        return None


def give_up(ctx: BindContext, lease: LeaseRecord, why: str) -> None:
    """The lease was not made here: its pod's allocation stays held (as a bound pod's without
    a lease) until the controller's restore makes it, or the pod is gone."""
    log.warning(
        "GpuLease %s of pod %s on %s not created (%s): its slices stay held; the controller "
        "makes the lease from the pod's allocation", lease.key, lease.pod.key, lease.node, why,
    )  # fmt: skip
    ctx.ledgers[lease.node].abort(lease.key, known=True)
    ctx.cache.delete_lease(lease.key)
    ctx.cache.hold_unleased(lease)
