"""What filter, prioritize, requeue and bind plan with: the planner of each placement policy, and
per pod the feasibility and scores of every node, kept while the cache does not change.

kube-scheduler calls filter then prioritize for the same pod with the same node list, and requeue
asks again each second: the plan (feasibility and scores over the whole snapshot) is computed once
per pod per cache state, and the snapshot rows of a node list once per snapshot and list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupool.adapters.extender_http.refusal import Refusal
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.domain.requests import Request
from gpupool.placement import Planner, TargetWorkload
from gpupool.placement.default_workload import default_workload
from gpupool.placement.filters import Feasibility
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.state.cluster import ClusterCache

PLANS_MAX = 1024  # pods whose plan is kept (beyond: all are dropped, and planned again)
ROWS_MEMO = 8  # node lists whose snapshot rows are kept (filter's list, prioritize's, ...)


class Planners:
    """One Planner per placement policy, made on first use; `default` for pods that name none."""

    def __init__(self, default: str, workload: TargetWorkload | None = None) -> None:
        self.default = default
        self.workload = workload or default_workload()
        self._by_policy: dict[str, Planner] = {}
        self.of(default)  # an unknown default policy fails at start, not at the first pod

    def of(self, policy: str | None) -> Planner:
        name = policy or self.default
        planner = self._by_policy.get(name)
        if planner is None:
            planner = self._by_policy[name] = Planner(name, self.workload)
        return planner


@dataclass(frozen=True, slots=True)
class Plan:
    generation: int
    snapshot_uid: int
    request: Request
    feas: Feasibility
    rows: np.ndarray
    scores: np.ndarray


class PlanMemo:
    def __init__(self, cache: ClusterCache, planners: Planners) -> None:
        self.cache = cache
        self.planners = planners
        self._plans: dict[str, Plan] = {}
        self._rows: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}

    def plan(self, pod: ScheduledPod) -> Plan | Refusal:
        """Feasibility and scores of every node for this pod, or why no node can take it."""
        refused = pod.refusal()
        if refused is not None:
            return refused
        snap = self.cache.snapshot()
        hit = self._plans.get(pod.key)
        if hit and hit.generation == self.cache.generation and hit.snapshot_uid == snap.uid:
            return hit
        feas, rows, scores = self.planners.of(pod.policy).scores(snap, pod.request)
        plan = Plan(self.cache.generation, snap.uid, pod.request, feas, rows, scores)
        if len(self._plans) > PLANS_MAX:
            self._plans.clear()
        self._plans[pod.key] = plan
        return plan

    def current(self, pod: ScheduledPod) -> Plan | None:
        """The plan kept for this pod if the cache is still as it was planned over (bind reuses
        filter's feasibility then); never computes one."""
        hit = self._plans.get(pod.key)
        if hit is None or hit.generation != self.cache.generation or hit.request != pod.request:
            return None
        return hit if hit.snapshot_uid == self.cache.snapshot().uid else None

    def rows(self, snap: ClusterSnapshot, names: tuple[str, ...]) -> np.ndarray:
        """Snapshot row of every name (-1: not a node the extender knows).

        kube-scheduler sends the same node list call after call (every node that passed its own
        filters), so the rows are kept per snapshot and list: a hit costs hashing and comparing
        the names in C instead of a dictionary lookup per name in Python."""
        key = (snap.uid, names)
        rows = self._rows.get(key)
        if rows is None:
            index = snap.index
            rows = np.fromiter((index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
            rows.flags.writeable = False
            if len(self._rows) >= ROWS_MEMO:
                self._rows.pop(next(iter(self._rows)))
            self._rows[key] = rows
        return rows
