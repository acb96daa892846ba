"""AllocationSource implementations that need no API server.

`InMemoryAllocationSource` is an honest implementation of our own interface (tests, the simulator,
a kwok demo). `UnwiredAllocationSource` is what the agent runs with until the Kubernetes-backed
source (GpuLease objects) exists: every Allocate then fails with a message that says so.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.ports import LeaseSourceUnavailable, PodLease


class InMemoryAllocationSource:
    def __init__(self) -> None:
        self._leases: dict[str, PodLease] = {}

    def add(self, lease: PodLease) -> None:
        self._leases[lease.lease] = lease

    def release(self, lease: str) -> None:
        """The pod ended: its lease is no longer listed."""
        self._leases.pop(lease, None)

    def get(self, lease: str) -> PodLease | None:
        return self._leases.get(lease)

    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        return tuple(x for x in self._leases.values() if x.node == node)

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        held = self._leases.get(lease)
        if held is None:
            raise LeaseSourceUnavailable(f"lease {lease} was released while it was being allocated")
        self._leases[lease] = replace(held, device_ids=tuple(device_ids))


class UnwiredAllocationSource:
    """No lease source yet: the Kubernetes-backed one comes with the GpuLease CRD."""

    MESSAGE = (
        "the gpupool agent runs without a lease source (the Kubernetes-backed AllocationSource "
        "that reads GpuLease objects is not wired yet), so it cannot tell which lease a "
        "container serves"
    )

    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        raise LeaseSourceUnavailable(self.MESSAGE)

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        raise LeaseSourceUnavailable(self.MESSAGE)
