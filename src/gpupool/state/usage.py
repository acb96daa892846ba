"""A GpuLease record as `quota.usage` counts it: what it held (its slices' memory, and each
slice's share of its card as card-equivalents) from its start to its end."""

from __future__ import annotations

from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import get_model
from gpupool.domain.requests import MILLI
from gpupool.quota.usage import Held
from gpupool.state.lease import LeaseRecord


def card_milli(model: str, size_bytes: int) -> int:
    """A slice's share of its card in milli-GPU (a whole card when its memory is not known)."""
    try:
        memory = get_model(model).memory_bytes
    except GpupoolError:
        memory = None
    if not memory:
        return MILLI
    return min(MILLI, round(MILLI * size_bytes / memory))


def held_of(lease: LeaseRecord, now: float) -> Held:
    """Its start as metering takes it (`LeaseRecord.accounting`: never after `now`)."""
    return Held(
        tenant=lease.tenant,
        namespace=lease.pod.namespace or lease.namespace,
        pod=lease.pod.name,
        gpu_memory_bytes=lease.memory_bytes,
        gpu_milli=sum(card_milli(s.model, s.size_bytes) for s in lease.slices),
        start=min(lease.start, now),
        end=lease.end,
    )
