"""Nodes and the GPUs on them, as values."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain.errors import InvalidNode
from gpupool.domain.models import GpuModel, get_model

# How many pods may share one card: the node agent's device plugin offers this many
# `gpupool.io/vgpu` devices per card (its --vgpu-per-card) and reports the figure on the GpuNode.
SHARES_PER_CARD = 10


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    model: str
    uuid: str = ""
    memory_bytes: int | None = None  # None: the model's catalogue figure (unknown for G2/G3)
    numa_node: int = 0
    nvlink_domain: int | None = None  # cards sharing a domain id are NVLink peers
    healthy: bool = True
    shares: int = SHARES_PER_CARD  # the most pods placed on this card at once

    def __post_init__(self) -> None:
        if self.index < 0:
            raise InvalidNode(f"GPU index must be 0 or more; got {self.index}")
        if self.shares < 1:
            raise InvalidNode(
                f"GPU {self.index}: its share count must be 1 or more; got {self.shares}"
            )
        canonical = get_model(self.model)
        object.__setattr__(self, "model", canonical.name)
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise InvalidNode(f"GPU {self.index}: memory must be positive; got {self.memory_bytes}")

    @property
    def spec(self) -> GpuModel:
        return get_model(self.model)

    @property
    def total_memory(self) -> int | None:
        return self.memory_bytes if self.memory_bytes is not None else self.spec.memory_bytes


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[Gpu, ...] = ()
    labels: tuple[tuple[str, str], ...] = field(default=())
    schedulable: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidNode("a node needs a name")
        if self.cpu_milli < 0:
            raise InvalidNode(f"node {self.name}: cpu must be 0 or more; got {self.cpu_milli}m")
        if self.memory_mib < 0:
            raise InvalidNode(
                f"node {self.name}: memory must be 0 or more; got {self.memory_mib}Mi"
            )
        indexes = [g.index for g in self.gpus]
        if len(set(indexes)) != len(indexes):
            raise InvalidNode(f"node {self.name}: GPU indexes repeat: {sorted(indexes)}")

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


def uniform_node(
    name: str,
    *,
    cpu_milli: int,
    memory_mib: int,
    gpu_count: int,
    model: str,
    nvlink: bool = False,
    numa_nodes: int = 1,
) -> Node:
    """A node with `gpu_count` identical cards; uuids are derived from the node name."""
    per_numa = max(1, -(-gpu_count // max(1, numa_nodes)))
    gpus = tuple(
        Gpu(
            index=i,
            model=model,
            uuid=f"GPU-{name}-{i}",
            numa_node=i // per_numa,
            nvlink_domain=0 if nvlink else None,
        )
        for i in range(gpu_count)
    )
    return Node(name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, gpus=gpus)
