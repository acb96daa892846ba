"""The reclaim notice on a victim pod (`ReclaimNotice`): reclaim chose it, and when it will be
evicted. The deadline is kept on the pod (annotation `gpupool.io/reclaim-notice`, read and written
in `adapters.wire.reclaim_notice`), so a restarted controller carries on where it stopped."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReclaimNotice:
    at: float
    evict_at: float
    claimant: str  # the tenant that gets its quota back
    claimant_pod: str = ""  # namespace/name of the pod that waited for it
    blocked: str | None = None  # why the last eviction attempt was refused (429)
    room: str | None = None  # for room: the node where `claimant_pod` fits once victims are gone
