"""The quantity a quota is denominated in, and how much of it a request takes.

A quota counts one resource:

- `gpu-memory`: bytes of GPU memory (the live system's natural unit: a pod asks for
  `gpupool.io/gpu-memory: 12Gi` per GPU). Budgets are then GiB-hours.
- `gpu`: milli-GPU, 1000 = one whole card (the Alibaba trace's unit: it gives GPU shares, and two
  of its card models, G2 and G3, have no published memory size). Budgets are then GPU-hours.

Every tenant in one cohort must use the same resource, or their quotas could not be lent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

from gpupool.domain.allocations import Slice
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


def slice_amount(size_bytes: int, card_bytes: int | None, resource: Resource) -> int | None:
    """What one slice of `size_bytes` on a card of `card_bytes` (what the card offers slices)
    holds in `resource`: its bytes, or its share of the card in milli-GPU, rounded up and at
    most one card (None when the card's size is unknown and the resource needs it)."""
    if resource is Resource.GPU_MEMORY:
        return size_bytes
    if card_bytes is None or card_bytes <= 0:
        return None
    return min(MILLI, -(-size_bytes * MILLI // card_bytes))


def held_amount(
    slices: Sequence[Slice], resource: Resource, card_bytes: Mapping[str, int]
) -> int | None:
    """What an allocation's slices hold in `resource`: the sum over its slices, each sized
    against its card (`card_bytes`: card uuid -> bytes the card offers slices). A whole card
    holds the card (1000 milli, or its bytes); None when a card's size is unknown and the
    resource needs it. This is the amount a lease must be charged (`charge_problem`)."""
    total = 0
    for piece in slices:
        amount = slice_amount(piece.size_bytes, card_bytes.get(piece.uuid), resource)
        if amount is None:
            return None
        total += amount
    return total


def charge_problem(
    charged: int, slices: Sequence[Slice], resource: Resource, card_bytes: Mapping[str, int]
) -> str | None:
    """Why a lease charged `charged` in `resource` disagrees with what its `slices` hold, or
    None when it agrees (or a card's size is unknown, so the holding cannot be told)."""
    held = held_amount(slices, resource, card_bytes)
    if held is None or held == charged:
        return None
    where = ", ".join(
        f"{resource.format(slice_amount(s.size_bytes, card_bytes.get(s.uuid), resource) or 0)}"
        f" on {s.uuid}"
        for s in slices
    )
    return (
        f"charged {resource.format(charged)} but holds {resource.format(held)} "
        f"({len(slices)} slice(s): {where})"
    )
