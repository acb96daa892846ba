"""The node health reconciler: GpuNode heartbeats to Suspect/Lost, a Lost node's leases to Lost
and its GPU pods deleted (`node_health_plan` decides; this applies it)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpupool.adapters.cluster import ClusterApi
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.lease_plan import read_lease
from gpupool.controllers.node_health_plan import (
    LOST_S,
    SUSPECT_S,
    HealthPlan,
    plan_node_health,
    read_gpu_node,
)

log = logging.getLogger("gpupool.controller.nodes")


class NodeHealthReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Callable[[], float],
        *,
        suspect_s: float = SUSPECT_S,
        lost_s: float = LOST_S,
    ) -> None:
        self.api = api
        self.clock = clock
        self.suspect_s = suspect_s
        self.lost_s = lost_s

    async def reconcile(self) -> HealthPlan:
        nodes = [read_gpu_node(n) for n in await self.api.gpu_nodes()]
        leases = [read_lease(le) for le in await self.api.leases()]
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
        for lost in plan.lose:
            lease = lost.lease
            await self.api.patch_lease_status(
                lease.namespace,
                lease.name,
                {
                    "phase": "Lost",
                    "end": stamp,
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
        for namespace, name in plan.delete_pods:
            if await self.api.delete_pod(namespace, name, grace_s=0):
                log.warning("deleted pod %s/%s from a lost node", namespace, name)
        return plan
