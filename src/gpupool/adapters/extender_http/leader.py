"""The extender's side of leader election (the elector itself is
gpupool.adapters.kubernetes.leader): binding writes refused unless this replica leads."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.adapters.extender_http.api import ExtenderApi
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.state.lease import LeaseRecord


class LeaderOnlyWrites:
    """An ExtenderApi whose binding writes (create_lease, bind_pod) are refused unless this
    replica leads at that moment. /bind checks leadership when a bind starts; a bind may then wait
    for a slot and for reads past the renew deadline, and another replica may take over the
    lease: checked again right before each write, the old leader's bind stops instead of
    reserving beside the new leader's. Reads and clean-up (delete_lease, annotate_pod) pass."""

    def __init__(self, api: ExtenderApi, is_leader: Callable[[], bool]) -> None:
        self.api = api
        self.is_leader = is_leader

    def _check(self, what: str) -> None:
        if not self.is_leader():
            raise NotLeader(f"{what} refused: this gpupool extender replica is no longer leader")

    async def get_pod(self, namespace: str, name: str) -> ScheduledPod:
        return await self.api.get_pod(namespace, name)

    async def leases_on_node(self, node: str) -> list[LeaseRecord]:
        return await self.api.leases_on_node(node)

    async def held_by_bound_pods(self) -> list[LeaseRecord]:
        return await self.api.held_by_bound_pods()

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        return await self.api.get_lease(namespace, name)

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        self._check(f"GpuLease {lease.key}")
        return await self.api.create_lease(lease)

    async def delete_lease(self, namespace: str, name: str) -> None:
        await self.api.delete_lease(namespace, name)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self.api.annotate_pod(namespace, name, annotations)

    async def gang_pods(self, namespace: str, gang: str) -> list[ScheduledPod]:
        return await self.api.gang_pods(namespace, gang)

    async def pod_event(self, pod: ScheduledPod, reason: str, message: str) -> None:
        await self.api.pod_event(pod, reason, message)

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self._check(f"Binding of {namespace}/{name} to {node}")
        await self.api.bind_pod(namespace, name, uid, node, annotations)
