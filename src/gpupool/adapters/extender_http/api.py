"""What bind needs from the API server (implemented with lightkube and the bind writer in
`k8s_api.py`; guarded by leadership in `leader.py`). A pod comes back decoded (`ScheduledPod`);
an error status comes back as the typed `ApiServerError` kinds (a create of a lease that exists:
`Conflict`)."""

from __future__ import annotations

from typing import Protocol

from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.state.lease import LeaseRecord


class ExtenderApi(Protocol):
    async def get_pod(self, namespace: str, name: str) -> ScheduledPod: ...

    async def leases_on_node(self, node: str) -> list[LeaseRecord]: ...

    async def held_by_bound_pods(self) -> list[LeaseRecord]:
        """What the bound GPU pods hold by their allocations (`state.pod_hold.held_by`), as the
        leases bind makes for them (named after their uid)."""
        ...

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None: ...

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord: ...

    async def delete_lease(self, namespace: str, name: str) -> None: ...

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> None: ...

    async def gang_pods(self, namespace: str, gang: str) -> list[ScheduledPod]:
        """The pods of `namespace` labelled `gpupool.io/gang: <gang>`."""
        ...

    async def pod_event(self, pod: ScheduledPod, reason: str, message: str) -> None:
        """A Warning event on the pod (best effort: the caller logs a failure)."""
        ...

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str] | None = None,
    ) -> None: ...
