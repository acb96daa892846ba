"""The node health reconciler: GpuNode heartbeats to Suspect/Lost, a Lost node's leases to Lost
and its GPU pods deleted (`node_health.plan` decides; this applies it). A write that fails raises:
the manager logs it and the next round, from the API server's state, plans it again."""

from __future__ import annotations

import logging

from gpupool.adapters.kubernetes.lease import phase_name
from gpupool.adapters.kubernetes.node import read_gpu_node
from gpupool.controllers.node_health.plan import LOST_S, SUSPECT_S, HealthPlan, plan_node_health
from gpupool.controllers.reads import read_leases
from gpupool.ports import Clock, ClusterApi, Outcomes
from gpupool.rfc3339 import format_time

log = logging.getLogger("gpupool.controller.nodes")


class NodeHealthReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        *,
        suspect_s: float = SUSPECT_S,
        lost_s: float = LOST_S,
        outcomes: Outcomes | None = None,
    ) -> None:
        self.api = api
        self.outcomes = outcomes
        self.clock = clock
        self.suspect_s = suspect_s
        self.lost_s = lost_s

    async def reconcile(self) -> HealthPlan:
        nodes = [read_gpu_node(n) for n in await self.api.gpu_nodes()]
        leases = read_leases(await self.api.leases(), log)
        now = self.clock()
        plan = plan_node_health(nodes, leases, now, suspect_s=self.suspect_s, lost_s=self.lost_s)
        stamp = format_time(now)
        for change in plan.health:
            log.warning("GpuNode %s: %s (%s)", change.node, change.health, change.message)
            await self.api.patch_gpu_node_status(
                change.node,
                {
                    "health": change.health,
                    "conditions": [
                        {
                            "type": "Heartbeat",
                            "status": "True" if change.health == "Healthy" else "False",
                            "reason": change.health,
                            "message": change.message,
                            "lastTransitionTime": stamp,
                        }
                    ],
                },
            )
        # A lost lease's pod goes first, then the lease: a round that fails between the two
        # finds the lease still live next time and deletes (or finds gone) its pod again, where
        # the other order would leave a pod on a lost node behind an ended lease for ever.
        deleted: set[tuple[str, str]] = set()
        for lost in plan.lose:
            lease = lost.lease
            pod = (lease.pod.namespace, lease.pod.name)
            if pod not in deleted:
                deleted.add(pod)
                if await self.api.delete_pod(*pod, grace_s=0):
                    log.warning("deleted pod %s from lost node %s", lease.pod.key, lease.node)
                    if self.outcomes is not None:
                        self.outcomes.evicted("NodeLost")
            await self.api.patch_lease_status(
                lease.namespace,
                lease.name,
                {
                    "phase": phase_name(lost.to.phase),
                    "end": format_time(lost.to.ended_at or now),
                    "gibHours": round(lost.gib_hours, 6),
                    "conditions": [
                        {
                            "type": "Lost",
                            "status": "True",
                            "reason": "NodeLost",
                            "message": lost.message,
                            "lastTransitionTime": stamp,
                        }
                    ],
                },
            )
        return plan
