"""The admission queue as people read it: every pod still at the quota gate, in its tenant's
admission order, with its position and why it waits, and every admitted pod that no card takes
yet.

Positions and reasons are what the admission controller last recorded (the GpuQuota's
`status.queue`, the head of each tenant's queue in order); the views do not order the queue
again. A gated pod the controller has not placed in a status yet (just created, or past the
status's first 100) shows its `gpupool.io/queue` note, or that it waits for the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.state.pods import PodView
from gpupool.state.views.inputs import QuotaStatus

NOT_SEEN = "waiting for the admission controller to order it"
NO_CARD = "admitted; no node has room for it yet (kube-scheduler: Unschedulable)"
SCHEDULING = "admitted; being scheduled"


@dataclass(frozen=True, slots=True)
class QueueItem:
    tenant: str
    pod: str  # namespace/name
    stage: str  # "quota" (at the quota gate) | "scheduling" (admitted, not on a card yet)
    position: int | None  # in the tenant's admission queue (1 = next); None when not known
    of: int | None  # how many wait in that queue
    reason: str
    priority: int
    memory_bytes: int | None  # per GPU; None for share requests
    gpus: int
    waited_s: float


def _memory(pod: PodView) -> tuple[int | None, int]:
    if pod.request is None:
        return None, 0
    return pod.request.gpu_memory_bytes, pod.request.gpu_count


def build_queue(
    pods: Iterable[PodView],
    statuses: Mapping[str, QuotaStatus],
    now: float,
    *,
    pods_visible: bool = True,
) -> tuple[QueueItem, ...]:
    """`pods_visible` False: the caller may not list the pods (a tenant whose role reads only
    leases and its quota); the queue is then the quotas' recorded heads alone."""
    recorded: dict[str, tuple[int, int, str]] = {}
    for status in statuses.values():
        for entry in status.queue:
            recorded[entry.key] = (entry.position, status.queued, entry.reason)
    items: list[QueueItem] = []
    for pod in pods:
        if pod.terminal or pod.deleting or pod.request is None:
            continue
        memory, gpus = _memory(pod)
        waited = max(0.0, now - pod.submitted_at)
        if pod.gated:
            position, of, reason = recorded.get(pod.key, (None, None, pod.queue_note or NOT_SEEN))
            if position is None and pod.tenant in statuses:
                of = statuses[pod.tenant].queued or None
            items.append(
                QueueItem(
                    pod.tenant,
                    pod.key,
                    "quota",
                    position,
                    of,
                    reason,
                    pod.priority,
                    memory,
                    gpus,
                    waited,
                )
            )
        elif pod.node is None:
            reason = NO_CARD if pod.unschedulable else SCHEDULING
            items.append(
                QueueItem(
                    pod.tenant,
                    pod.key,
                    "scheduling",
                    None,
                    None,
                    reason,
                    pod.priority,
                    memory,
                    gpus,
                    waited,
                )
            )
    if not pods_visible:
        for tenant, status in statuses.items():
            for entry in status.queue:
                items.append(
                    QueueItem(
                        tenant,
                        entry.key,
                        "quota",
                        entry.position,
                        status.queued,
                        entry.reason,
                        0,
                        None,
                        0,
                        0.0,
                    )
                )
    unknown = 1 << 62
    items.sort(
        key=lambda q: (q.stage != "quota", q.tenant, q.position or unknown, -q.waited_s, q.pod)
    )
    return tuple(items)
