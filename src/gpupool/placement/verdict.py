"""What the planner answers when a request cannot be placed: counts of reasons, no exception."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.requests import Request

REASON_LABEL = {
    "CONDITION": "node not schedulable",
    "NO_GPUS": "no GPUs",
    "MODEL": "GPU model not accepted",
    "TOO_FEW_GPUS": "too few GPUs",
    "CARD_TOO_SMALL": "cards too small",
    "MEMORY_UNKNOWN": "card memory unknown",
    "UNHEALTHY": "too few healthy GPUs",
    "CPU": "insufficient cpu",
    "MEMORY": "insufficient memory",
    "GPU_MEMORY": "insufficient GPU memory on every card",
    "GPU_COMPUTE": "insufficient GPU compute on every card",
    "WHOLE_CARDS": "too few whole free GPUs",
    "SHARES": "every card with room at its share count (pods per card)",
    "DEFRAG": "cards with room closed to new slices (defragmentation)",
    "OTHER_PATH": "served by another GPU path too (a device plugin or DRA driver; the "
    "GpuNode's OtherGpuPath condition says which)",
}


@dataclass(frozen=True, slots=True)
class Unschedulable:
    request: Request
    nodes: int
    reasons: tuple[tuple[str, int], ...]  # (reason label, node count), most common first
    unresolvable: bool  # no node could take it even if emptied

    @property
    def message(self) -> str:
        parts = ", ".join(f"{count} {label}" for label, count in self.reasons)
        return f"0/{self.nodes} nodes can take {self.request.name!r}: {parts or 'no nodes'}"
