"""What the controller recorded that the views read, as typed values (decoded from JSON at the
edge, `adapters.kubernetes.views_read`): a GpuQuota's `status` (`QuotaStatus`, with the head of
the tenant's admission queue in admission order, `QueueEntry`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueEntry:
    namespace: str
    name: str
    position: int
    reason: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """`status` of one GpuQuota as the admission controller last wrote it (amounts in the quota's
    resource: bytes for gpu-memory, milli-GPU for gpu)."""

    used: int = 0
    borrowed: int = 0
    lent: int = 0
    pods: int = 0
    queued: int = 0
    queue: tuple[QueueEntry, ...] = ()
    hours_used: float | None = None  # in the current budget window (absent: not reported)
