"""The quantity a quota is denominated in, and how much of it a request takes.

A quota counts one resource:

- `gpu-memory`: bytes of GPU memory (the live system's natural unit: a pod asks for
  `gpupool.io/gpu-memory: 12Gi` per GPU). Budgets are then GiB-hours.
- `gpu`: milli-GPU, 1000 = one whole card (the Alibaba trace's unit: it gives GPU shares, and two
  of its card models, G2 and G3, have no published memory size). Budgets are then GPU-hours.

Every tenant in one cohort must use the same resource, or their quotas could not be lent.
"""

from __future__ import annotations

from enum import Enum

from gpupool.domain.errors import InvalidRequest
from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import GiB, format_bytes


class Resource(Enum):
    GPU_MEMORY = "gpu-memory"
    GPU = "gpu"

    @classmethod
    def parse(cls, text: str) -> Resource:
        for member in cls:
            if member.value == text.strip():
                return member
        raise InvalidRequest(
            f"unknown quota resource {text!r}; use 'gpu-memory' (bytes) or 'gpu' (milli-GPU)"
        )

    @property
    def hour_unit(self) -> str:
        """The unit a budget in this resource is written in."""
        return "GiB-hours" if self is Resource.GPU_MEMORY else "GPU-hours"

    @property
    def per_unit(self) -> int:
        """Quantity of one budget unit: a GiB for memory, a whole GPU for milli-GPU."""
        return GiB if self is Resource.GPU_MEMORY else MILLI

    def format(self, amount: int) -> str:
        if self is Resource.GPU_MEMORY:
            return format_bytes(amount) if amount else "0"
        return f"{amount}m"

    def hours(self, amount: int, seconds: float) -> float:
        """Metered usage of `amount` held for `seconds`, in this resource's hour unit."""
        return amount / self.per_unit * seconds / 3600.0


def demand_of(request: Request, resource: Resource, card_memory_bytes: int | None = None) -> int:
    """How much of `resource` a request takes, over all its GPUs.

    A share request (`gpu_milli`) counted in bytes, or a byte request counted in milli-GPU, needs
    the size of the card it lands on (`card_memory_bytes`); without it the conversion is impossible
    and the error says how to make it possible.
    """
    if not request.wants_gpu:
        return 0
    count = request.gpu_count
    if resource is Resource.GPU:
        if request.gpu_milli is not None:
            return request.gpu_milli * count
        assert request.gpu_memory_bytes is not None
        if card_memory_bytes is None:
            raise InvalidRequest(
                f"request {request.name!r} asks for "
                f"{format_bytes(request.gpu_memory_bytes)} of GPU memory but its tenant's quota "
                f"counts milli-GPU; without the card size the share is unknown: express the "
                f"quota in 'gpu-memory' or ask for a GPU share"
            )
        share = -(-request.gpu_memory_bytes * MILLI // card_memory_bytes)
        return min(MILLI, share) * count
    if request.gpu_memory_bytes is not None:
        return request.gpu_memory_bytes * count
    assert request.gpu_milli is not None
    if card_memory_bytes is None and request.whole_cards:
        raise InvalidRequest(
            f"request {request.name!r} asks for {count} whole GPU(s), which its tenant's quota "
            f"counts as the card's memory, but no card it may use is known yet (no node reports "
            f"one): it is admitted once such a node joins; or ask for gpupool.io/gpu-memory"
        )
    if card_memory_bytes is None:
        raise InvalidRequest(
            f"request {request.name!r} asks for a {request.gpu_milli} milli-GPU share but its "
            f"tenant's quota counts GPU memory; ask for gpupool.io/gpu-memory instead, or express "
            f"the quota in 'gpu' (milli-GPU)"
        )
    return card_memory_bytes * request.gpu_milli // MILLI * count
