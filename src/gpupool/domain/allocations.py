"""Where a request landed: a node and, per GPU, the slice it holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Slice:
    gpu_index: int
    uuid: str
    model: str
    offset_bytes: int
    size_bytes: int
    compute_milli: int  # share of SMs reserved, 0..1000 (0: no hard cap)

    def to_annotation(self) -> dict[str, object]:
        """The per-GPU object of the `gpupool.io/allocation` annotation (DESIGN section 3)."""
        return {
            "uuid": self.uuid,
            "index": self.gpu_index,
            "model": self.model,
            "offsetBytes": self.offset_bytes,
            "sizeBytes": self.size_bytes,
            "computePercent": self.compute_milli // 10,
        }


@dataclass(frozen=True, slots=True)
class Allocation:
    request: str
    node: str
    cpu_milli: int
    memory_mib: int
    slices: tuple[Slice, ...]

    @property
    def gpu_memory_bytes(self) -> int:
        return sum(s.size_bytes for s in self.slices)
