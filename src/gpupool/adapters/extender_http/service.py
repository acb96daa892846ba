"""The extender: kube-scheduler's filter, prioritize and bind for gpupool pods, each a step in
its own module over the cache's snapshot (`ClusterCache`, fed by the informer):

- filter.py: which nodes take the pod, and why each other one does not; filter_pick.py: the
  planner's pick answered alone where kube-scheduler's scoring could not change it (the
  scoring phase, /prioritize included, is then skipped);
- prioritize.py: the planner's pick and scores on kube-scheduler's 0..10, as JSON text, and
  where pods that ask for no GPU go among GPU nodes (`prioritize-cpu`);
- bind.py: the bind's named steps (bind_check.py, gang_bind.py, reserve.py, bind_write.py) over
  one per-bind state (bind_state.py); every failure becomes a typed refusal in one place
  (bind_failure.py) and the reservation is undone there, once; ledger.py, locks.py and held.py:
  what bind knows of each node, who may touch it, and the leases counted before they exist;
- requeue.py: pods refused everywhere are sent back to kube-scheduler once a node takes them;
- gang_bind.py, gang_hold.py: a gang is bound only when all of it fits, and the room of its
  other members is held for a while (released by the requeue loop's tick once past its time);
- plans.py: the planners and the per-pod plans the steps share.

`Extender` only wires them together for the HTTP server (server.py): every pod arrives decoded
(`ScheduledPod`, in the wire types' `from_json`) and flows down as that value.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from gpupool.adapters.extender_http.api import ExtenderApi
from gpupool.adapters.extender_http.bind import BIND_WAIT_S, MAX_BINDS, Binder
from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.filter import Tally, filter_nodes
from gpupool.adapters.extender_http.filter_pick import PICK_TTL_S, pick_alone
from gpupool.adapters.extender_http.gang_bind import sweep
from gpupool.adapters.extender_http.ledger import LEDGER_MAX_AGE_S
from gpupool.adapters.extender_http.plans import PlanMemo, Planners
from gpupool.adapters.extender_http.prioritize import (
    PriorityEncoder,
    cpu_score_array,
    node_scores,
    score_array,
)
from gpupool.adapters.extender_http.refusal import Why
from gpupool.adapters.extender_http.requeue import RefusedPods, requeue, requeue_loop
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
)
from gpupool.domain.compute_modes import BUILT_IN, ComputeModes
from gpupool.placement import TargetWorkload
from gpupool.state.cluster import ClusterCache


class Extender:
    def __init__(
        self,
        cache: ClusterCache,
        api: ExtenderApi | None = None,
        *,
        policy: str = "gpupool",
        workload: TargetWorkload | None = None,
        max_binds: int = MAX_BINDS,
        bind_wait_s: float = BIND_WAIT_S,
        ledger_max_age_s: float = LEDGER_MAX_AGE_S,
        clock: Callable[[], float] = time.time,
        compute_modes: Callable[[], ComputeModes] = lambda: BUILT_IN,
    ) -> None:
        self.cache = cache
        self.clock = clock  # wall clock: room holds end at a time written on the API server
        self.api = api
        planners = Planners(policy, workload)
        self.plans = PlanMemo(cache, planners)
        self.refused = RefusedPods()
        self._encoder = PriorityEncoder()
        self._tally: Tally = lambda reason, nodes: None
        self._on_scores: Callable[[np.ndarray], None] = lambda scores: None
        self._on_expired: Callable[[int], None] = lambda picks: None
        self.binder = (
            None
            if api is None
            else Binder(
                BindContext(
                    cache,
                    api,
                    planners,
                    ledger_max_age_s=ledger_max_age_s,
                    compute_modes=compute_modes,
                ),
                plans=self.plans,
                max_binds=max_binds,
                bind_wait_s=bind_wait_s,
            )
        )

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        if self.binder is not None:
            self.binder.remember(args.pod)
        gang_node = None if self.binder is None else self.binder.gangs.node_for(args.pod)
        self.cache.forget_pick(args.pod.lease_key)  # filtered again: its last pick is void
        now = self.clock()
        result = filter_nodes(self.plans, args.pod, args.node_names, now, gang_node, self._tally)
        self.refused.note(args.pod, args.node_names, refused=result.node_names is None)
        return pick_alone(self.plans, args.pod, result, self._on_scores, now)

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        scores = node_scores(self.plans, args.pod, args.node_names)
        return [HostPriority(n, s) for n, s in zip(args.node_names, scores, strict=True)]

    def prioritize_encoded(self, args: ExtenderArgs) -> bytes:
        """The prioritize reply as JSON text (what the server sends)."""
        scores = score_array(self.plans, args.pod, args.node_names)
        self._on_scores(scores)
        return self._encoder.encode(args.node_names, scores)

    def prioritize_cpu_encoded(self, args: ExtenderArgs) -> bytes:
        """The `prioritize-cpu` reply (pods that ask for no gpupool GPU) as JSON text."""
        scores = cpu_score_array(self.plans, args.pod, args.node_names)
        return self._encoder.encode(args.node_names, scores)

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        if self.binder is None:
            return ExtenderBindingResult.refused(
                Why.NO_API, "this extender has no API client; it cannot bind"
            )
        return await self.binder.bind(args)

    def set_step_timer(self, on_step: Callable[[str, float], None]) -> None:
        """Report each bind step's seconds (the server's metrics)."""
        if self.binder is not None:
            self.binder.ctx.timer.on_step = on_step

    def set_refusal_tally(self, tally: Tally) -> None:
        """Tell `tally` each filter call's refused nodes per reason (the server's metrics)."""
        self._tally = tally

    def set_score_sink(self, on_scores: Callable[[np.ndarray], None]) -> None:
        """Give `on_scores` each prioritize reply's 0..10 scores (the server's metrics)."""
        self._on_scores = on_scores

    def forget_ledgers(self) -> None:
        """Trust nothing known about leases: each node's next bind re-lists it (a new leader)."""
        if self.binder is not None:
            self.binder.ctx.ledgers.forget()

    async def drain_leases(self) -> None:
        """Wait for the GpuLeases being created after their Bindings (shutdown)."""
        if self.binder is not None:
            await self.binder.ctx.leases.drain()

    def refused_that_fit(self) -> list[ScheduledPod]:
        return self.refused.that_fit(self.plans, self.clock())

    async def requeue_refused(self) -> int:
        """Annotate every refused pod that now fits (requeue.py); how many."""
        if self.api is None:
            return 0
        return await requeue(self.api, self.refused_that_fit(), self.cache.generation)

    async def sweep_gang_holds(self) -> int:
        """Release gangs' held room past its time (gang_bind.sweep); how many."""
        return 0 if self.binder is None else await sweep(self.binder.ctx, self.binder.gangs)

    def set_pick_expiry_sink(self, on_expired: Callable[[int], None]) -> None:
        """Tell `on_expired` how many picks each sweep let go (their binds never came)."""
        self._on_expired = on_expired

    async def _tick(self) -> int:
        expired = self.cache.sweep_picks(self.clock() - PICK_TTL_S)
        if expired:
            self._on_expired(expired)
        await self.sweep_gang_holds()
        return await self.requeue_refused()

    async def requeue_loop(self, stop: asyncio.Event, leading: Callable[[], bool]) -> None:
        await requeue_loop(stop, leading, self._tick)
