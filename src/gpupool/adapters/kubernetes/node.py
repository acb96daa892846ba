"""A Kubernetes node and its GpuNode → the domain `Node` that placement reads.

The GpuNode (written by the node agent) is the truth about a node's cards: uuid, index, model,
memory (slices take `allocatableBytes`, the card less the node's reserve), NUMA, NVLink, health.
A node without a GpuNode falls back on the labels the dev cluster's fake nodes carry
(`gpupool.io/gpu-model`, `gpu-count`, `gpu-memory-bytes`) and the default reserve. CPU and memory
are left to kube-scheduler, so the domain node gets none and requests ask for none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.kubernetes import LABEL_GPU_COUNT, LABEL_GPU_MEMORY, LABEL_GPU_MODEL
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.domain.devices import Gpu, Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT, allocatable_bytes

KIND = "GpuNode"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def gpus_from_gpunode(gpunode: Mapping[str, Any]) -> tuple[Gpu, ...]:
    name = _name(gpunode)
    status = gpunode.get("status") or {}
    reserve = float(status.get("reservePercent", DEFAULT_RESERVE_PCT))
    gpus = []
    try:
        for d in status.get("devices") or []:
            total = int(d["memoryBytes"])
            usable = d.get("allocatableBytes")
            gpus.append(
                Gpu(
                    index=int(d["index"]),
                    model=str(d["model"]),
                    uuid=str(d.get("uuid") or f"GPU-{name}-{d['index']}"),
                    memory_bytes=int(usable) if usable else allocatable_bytes(total, reserve),
                    numa_node=int(d.get("numaNode", 0)),
                    nvlink_domain=None if d.get("nvlinkDomain") is None else int(d["nvlinkDomain"]),
                    healthy=bool(d.get("healthy", True)),
                )
            )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, GpupoolError):
            raise InvalidObject(KIND, name, str(err)) from None
        raise InvalidObject(KIND, name, f"malformed device: {err!r}") from None
    return tuple(sorted(gpus, key=lambda g: g.index))


def gpus_from_labels(node: Mapping[str, Any]) -> tuple[Gpu, ...]:
    """Cards described by node labels (fake nodes); () when the node has none."""
    name = _name(node)
    labels = (node.get("metadata") or {}).get("labels") or {}
    if LABEL_GPU_MODEL not in labels:
        return ()
    try:
        count = int(labels.get(LABEL_GPU_COUNT, "1"))
        memory = labels.get(LABEL_GPU_MEMORY)
        gpus = []
        for i in range(count):
            gpu = Gpu(index=i, model=labels[LABEL_GPU_MODEL], uuid=f"GPU-{name}-{i}")
            total = int(memory) if memory else gpu.total_memory
            usable = None if total is None else allocatable_bytes(total, DEFAULT_RESERVE_PCT)
            gpus.append(Gpu(index=i, model=gpu.model, uuid=gpu.uuid, memory_bytes=usable))
    except (TypeError, ValueError) as err:
        raise InvalidObject("Node", name, f"bad gpupool GPU labels: {err}") from None
    return tuple(gpus)


def node_condition(node: Mapping[str, Any], gpunode: Mapping[str, Any] | None) -> str | None:
    """Why placement must skip the node now, or None."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "node is cordoned"
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return f"node not ready: {cond.get('reason') or cond.get('status')}"
    if gpunode is not None:
        if (gpunode.get("spec") or {}).get("unschedulable"):
            return "gpupool placement cordoned on this node (GpuNode spec.unschedulable)"
        status = gpunode.get("status") or {}
        health = status.get("health")
        if health in ("Suspect", "Lost"):
            detail = ""
            for cond in status.get("conditions") or []:
                if cond.get("type") in ("Heartbeat", "Ready") and cond.get("message"):
                    detail = f": {cond['message']}"
            return f"node {health.lower()}{detail or ': no recent agent heartbeat'}"
    return None


def node_from_json(node: Mapping[str, Any], gpunode: Mapping[str, Any] | None = None) -> Node:
    """The domain Node (GPUs from the GpuNode, else labels; cordon/readiness as schedulable)."""
    name = _name(node)
    if not name:
        raise InvalidObject("Node", name, "missing metadata.name")
    gpus = gpus_from_gpunode(gpunode) if gpunode is not None else gpus_from_labels(node)
    try:
        return Node(
            name=name,
            cpu_milli=0,
            memory_mib=0,
            gpus=gpus,
            schedulable=node_condition(node, gpunode) is None,
        )
    except GpupoolError as err:
        raise InvalidObject("Node", name, str(err)) from None
