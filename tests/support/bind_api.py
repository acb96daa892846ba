"""An in-memory ExtenderApi for bind (it records the writes) and a one-card cache: the extender's
HTTP tests (leader, forwarding, callers, the chart's certificates) bind through these."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.node import read_node
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord


class BindApi:
    """The ExtenderApi bind uses; `during_read` runs inside get_pod (leadership lost meanwhile)."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.reads = 0  # get_pod calls: each decodes the pod it fetched
        self.during_read: Callable[[], None] = lambda: None

    async def get_pod(self, namespace: str, name: str) -> ScheduledPod:
        self.reads += 1
        self.during_read()
        limits = {"gpupool.io/gpu-memory": "8Gi", "gpupool.io/vgpu": "1"}
        return ScheduledPod.from_json(
            {
                "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
            }
        )

    async def leases_on_node(self, node: str) -> list[LeaseRecord]:
        return []

    async def held_by_bound_pods(self) -> list[LeaseRecord]:
        return []

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        return None

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        self.writes.append(f"create {lease.key}")
        return lease

    async def delete_lease(self, namespace: str, name: str) -> None:
        self.writes.append(f"delete {namespace}/{name}")

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.writes.append(f"annotate {namespace}/{name}")

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self.writes.append(f"bind {namespace}/{name} {node}")


def one_card_cache(node: str = "n") -> ClusterCache:
    """A cache holding one ready node with one A100-80GB and no leases."""
    cache = ClusterCache()
    labels = {"gpupool.io/gpu-model": "A100-80GB", "gpupool.io/gpu-count": "1"}
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    cache.rebuild(
        [read_node(n) for n in [{"metadata": {"name": node, "labels": labels}, "status": ready}]],
        [],
        [],
    )
    return cache
