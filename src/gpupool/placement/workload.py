"""The target workload: the task shapes a cluster expects, weighted by how often they occur.

FGD measures fragmentation against it, and the simulator's fragmentation metric uses it too.
Shapes are (cpu, per-GPU demand, GPU count, accepted models); the most frequent ones are kept
up to a cumulative popularity cut-off (95% by default, as the FGD paper does) and renormalised.
Node memory is not part of a shape (FGD's shapes have none, and the paper's numbers rest on its
shapes), but each shape carries the mean memory its tasks ask for, which gpupool's measures use:
a node's free memory bounds how many tasks it can take as surely as its free CPU does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.domain.errors import InvalidRequest
from gpupool.domain.requests import MILLI, Request


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    cpu_milli: int
    gpu_milli: int  # per GPU share in milli; 0 for CPU-only shapes and byte requests
    gpu_count: int
    gpu_memory_bytes: int = 0  # per GPU, for byte requests
    compute_milli: int = 0
    models: tuple[str, ...] = ()

    @classmethod
    def of(cls, req: Request) -> Shape:
        if not req.wants_gpu:
            return cls(req.cpu_milli, 0, 0)
        if req.whole_cards:
            return cls(req.cpu_milli, MILLI, req.gpu_count, models=req.models)
        if req.gpu_milli is not None:
            return cls(req.cpu_milli, req.gpu_milli, req.gpu_count, models=req.models)
        return cls(
            req.cpu_milli,
            0,
            req.gpu_count,
            gpu_memory_bytes=req.gpu_memory_bytes or 0,
            compute_milli=req.compute_milli,
            models=req.models,
        )

    @property
    def wants_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def whole_cards(self) -> bool:
        return self.gpu_milli == MILLI

    @property
    def gpu_load(self) -> int:
        """Nominal GPU load of one task of this shape in milli-GPU (byte shapes: their compute
        share, else a whole card, since their share depends on the card)."""
        return self.gpu_count * (self.gpu_milli or self.compute_milli or MILLI)


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    shapes: tuple[Shape, ...]
    weights: tuple[float, ...]  # sum to 1
    memory_mib: tuple[int, ...] = ()  # per shape, the mean node memory its tasks ask; () for none

    def memory_of(self, k: int) -> int:
        """Mean node memory (MiB) the tasks of shape k ask (0 when the workload has none)."""
        return self.memory_mib[k] if self.memory_mib else 0

    @classmethod
    def from_requests(cls, requests: Iterable[Request], cutoff: float = 0.95) -> TargetWorkload:
        counts: Counter[Shape] = Counter()
        memory: Counter[Shape] = Counter()
        for r in requests:
            shape = Shape.of(r)
            counts[shape] += 1
            memory[shape] += r.memory_mib
        if not counts:
            raise InvalidRequest("the target workload needs at least one request")
        if not 0 < cutoff <= 1:
            raise InvalidRequest(f"popularity cut-off must be in (0, 1]; got {cutoff}")
        total = sum(counts.values())
        # Most frequent first; equal counts in a fixed order so that runs repeat exactly.
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kept: list[tuple[Shape, int]] = []
        running = 0
        for shape, count in ordered:
            kept.append((shape, count))
            running += count
            if running >= cutoff * total:
                break
        return cls(
            shapes=tuple(s for s, _ in kept),
            weights=tuple(c / running for _, c in kept),
            memory_mib=tuple(memory[s] // c for s, c in kept),
        )

    @property
    def smallest_gpu_milli(self) -> int:
        """Smallest per-GPU share among GPU shapes (for the 'unusable sliver' metric)."""
        shares = [s.gpu_milli for s in self.shapes if s.gpu_milli > 0]
        return min(shares) if shares else MILLI
