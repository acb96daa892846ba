"""`CardSizes`: the cards' sizes made again only when the GpuNodes are not the same decoded
objects as last time (a round over an unchanged cluster costs no pass over its cards)."""

from __future__ import annotations

from gpupool.adapters.kubernetes.node import read_gpu_node
from gpupool.controllers.leases.charge_audit import CardSizes
from gpupool.domain.units import GiB


def _gpunode(name: str, uuid: str, gib: int) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {"devices": [{"index": 0, "model": "A100-80GB", "uuid": uuid,
                                "memoryBytes": 80 * GiB, "allocatableBytes": gib * GiB}]},
    }  # fmt: skip


def test_the_same_gpunodes_give_the_same_sizes_and_a_changed_one_new_sizes() -> None:
    sizes = CardSizes()
    n1, n2 = read_gpu_node(_gpunode("n1", "GPU-a", 70)), read_gpu_node(_gpunode("n2", "GPU-b", 60))
    first = sizes([n1, n2])
    assert first == {"GPU-a": 70 * GiB, "GPU-b": 60 * GiB}
    assert sizes([n1, n2]) is first  # the very same objects: nothing made again
    changed = read_gpu_node(_gpunode("n2", "GPU-b", 50))  # n2's GpuNode written again
    assert sizes([n1, changed]) == {"GPU-a": 70 * GiB, "GPU-b": 50 * GiB}
    assert sizes([n1]) == {"GPU-a": 70 * GiB}  # a node gone
