"""Fake GPU nodes: parse `--gpus 8xA100-80GB` and build the Node objects kwok keeps alive.

`build_node` is pure (a spec in, a JSON-ready Node out) so that later work can publish the
matching GpuNode objects from the same specs. kwok keeps a node's `status.capacity` and
`allocatable` as created, so the fake GPUs appear there as `gpupool.io/vgpu`: cards ×
VGPU_PER_GPU (10) virtual devices, the resource gpupool's device plugin advertises: at most ten
slices share one card. The extender does the real per-card memory/compute accounting; this count
only bounds how many pods a card can hold.

A fake node is served by gpupool alone, as a node running gpupool's agent should be: it does not
advertise `nvidia.com/gpu` (NVIDIA's device plugin's resource), which would be a second path
handing out the same cards, unbooked by gpupool (docs/dra.md, "One node, which path"). A test
that wants such a node patches `nvidia.com/gpu` into the Node's status (`other_device_plugin`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.names import (
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    RES_VGPU,
)
from gpupool.devcluster.errors import InvalidClusterSpec
from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import GpuModel, get_model, parse_gpu_list

VGPU_PER_GPU = 10

VGPU_RESOURCE = RES_VGPU
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"
LABEL_TYPE = "type"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """`count` cards of one model per node (no model when there are no cards)."""

    count: int
    model: GpuModel | None

    def __str__(self) -> str:
        return f"{self.count}x{self.model.name}" if self.model else "no GPUs"


@dataclass(frozen=True, slots=True)
class FakeNodeSpec:
    name: str
    gpus: GpuSpec
    cpu: str = "96"
    memory: str = "1024Gi"
    pods: int = 110
    vgpu_per_gpu: int = VGPU_PER_GPU

    @property
    def vgpus(self) -> int:
        return self.gpus.count * self.vgpu_per_gpu


def parse_gpu_spec(text: str) -> GpuSpec:
    """`8xA100-80GB` → 8 × A100-80GB; a bare model name means one card; `0x...` means none."""
    try:
        parts = parse_gpu_list(text)
    except GpupoolError as err:
        raise InvalidClusterSpec(f"bad GPU spec {text!r}: {err}") from None
    if len(parts) != 1:
        raise InvalidClusterSpec(f"bad GPU spec {text!r}: a fake node has one model")
    count, model = parts[0]
    if count > 64:
        raise InvalidClusterSpec(f"bad GPU spec {text!r}: {count} GPUs on one node (at most 64)")
    return GpuSpec(count, model)


def node_specs(count: int, gpus: GpuSpec, *, prefix: str = "gpu-node") -> list[FakeNodeSpec]:
    """`count` identical nodes named `<prefix>-0` … `<prefix>-<count-1>`."""
    if count < 0 or count > 10_000:
        raise InvalidClusterSpec(f"bad node count {count}: expected 0..10000")
    return [FakeNodeSpec(f"{prefix}-{i}", gpus) for i in range(count)]


def fake_node_from_domain(node: Node) -> FakeNodeSpec:
    """The fake node for a domain Node (e.g. one row of the simulator's openb node list)."""
    models = {gpu.model for gpu in node.gpus}
    if len(models) > 1:
        raise InvalidClusterSpec(
            f"node {node.name}: mixed GPU models {sorted(models)}; a fake node has one model"
        )
    model = get_model(models.pop()) if models else None
    return FakeNodeSpec(
        name=node.name,
        gpus=GpuSpec(node.gpu_count, model),
        cpu=f"{node.cpu_milli}m",
        memory=f"{node.memory_mib}Mi",
    )


def node_labels(spec: FakeNodeSpec) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        LABEL_TYPE: "kwok",
        LABEL_GPU_COUNT: str(spec.gpus.count),
    }
    model = spec.gpus.model
    if model is not None and spec.gpus.count > 0:
        labels[LABEL_GPU_MODEL] = model.name
        if model.memory_bytes is not None:
            labels[LABEL_GPU_MEMORY] = str(model.memory_bytes)
    return labels


def node_capacity(spec: FakeNodeSpec) -> dict[str, str]:
    return {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": "1Ti",
        VGPU_RESOURCE: str(spec.vgpus),
    }


def build_node(spec: FakeNodeSpec, extra_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Node object (JSON-ready) of one fake GPU node; kwok adds conditions and addresses."""
    capacity = node_capacity(spec)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": {**node_labels(spec), **(extra_labels or {})},
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
            },
        },
    }


def other_device_plugin(cards: int, resource: str = NVIDIA_GPU_RESOURCE) -> dict[str, Any]:
    """The Node status patch that makes a fake node look as if another device plugin (NVIDIA's,
    by default) advertised `cards` devices on it; 0 takes it back as the kubelet does when a
    plugin goes away (the resource stays, at zero)."""
    amount = str(cards)
    return {"status": {"capacity": {resource: amount}, "allocatable": {resource: amount}}}


# Taints the node lifecycle controller (kube-controller-manager) lifts once a node is Ready.
_NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def ready_for_pods(node: Mapping[str, Any]) -> bool:
    """The node reports Ready and carries none of the not-ready taints."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") in _NOT_READY_TAINTS for t in taints)
