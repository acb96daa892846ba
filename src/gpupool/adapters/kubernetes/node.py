"""Node and GpuNode JSON → the typed `state.nodes` values (decoded once, as they arrive).

The GpuNode (written by the node agent) is the truth about a node's cards: uuid, index, model,
memory (slices take `allocatableBytes`, the card less the node's reserve), NUMA, NVLink, health,
and `shares`, the most pods on the card at once (the vgpu devices the agent's device plugin offers
for it; 10 when an older agent does not say). The agent's heartbeat is not on the GpuNode but on
the node's Lease (`node_lease`): `lease_renewals` reads when each was last renewed.
A node without a GpuNode falls back on the labels the dev cluster's fake nodes carry
(`gpupool.io/gpu-model`, `gpu-count`, `gpu-memory-bytes`) and the default reserve. A value that
cannot be read is still returned, with `problem` saying why (the extender reports it per node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.wire.defrag_mark import parse_mark
from gpupool.adapters.wire.names import (
    ANN_DEFRAG_MARK,
    COND_OTHER_GPU_PATH,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
)
from gpupool.adapters.wire.times import parse_time
from gpupool.domain.devices import SHARES_PER_CARD, Gpu, Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT, allocatable_bytes
from gpupool.state.nodes import GpuNodeObject, NodeObject, Taint, condition_of

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
                    shares=int(d.get("shares", SHARES_PER_CARD)),
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


def _not_ready(node: Mapping[str, Any]) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return str(cond.get("reason") or cond.get("status"))
    return None


def read_node(node: Mapping[str, Any]) -> NodeObject:
    """The typed Node; InvalidObject only without a name (nothing to key it by)."""
    name = _name(node)
    if not name:
        raise InvalidObject("Node", name, "missing metadata.name")
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    problem: str | None = None
    try:
        gpus = gpus_from_labels(node)
    except InvalidObject as err:
        gpus, problem = (), str(err)
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or ()
        if isinstance(t, Mapping)
    )
    return NodeObject(
        name=name,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        taints=taints,
        cordoned=bool(spec.get("unschedulable")),
        not_ready=_not_ready(node),
        label_gpus=gpus,
        problem=problem,
        address=node_address(node),
    )


def node_address(node: Mapping[str, Any]) -> str | None:
    """The node's InternalIP (where its agent serves /metrics), else its first address."""
    addresses = [
        a for a in (node.get("status") or {}).get("addresses") or () if isinstance(a, dict)
    ]
    for wanted in ("InternalIP", None):
        for item in addresses:
            if wanted is None or item.get("type") == wanted:
                return str(item.get("address") or "") or None
    return None


def read_gpu_node(gpunode: Mapping[str, Any]) -> GpuNodeObject:
    """The typed GpuNode (its devices and health)."""
    name = _name(gpunode)
    status = gpunode.get("status") or {}
    problem: str | None = None
    try:
        gpus = gpus_from_gpunode(gpunode)
    except InvalidObject as err:
        gpus, problem = (), str(err)
    detail = ""
    other: str | None = None
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Heartbeat", "Ready") and cond.get("message"):
            detail = str(cond["message"])
        if cond.get("type") == COND_OTHER_GPU_PATH and cond.get("status") == "True":
            other = str(cond.get("message") or "another path hands out this node's GPUs")
    return GpuNodeObject(
        name=name,
        gpus=gpus,
        unschedulable=bool((gpunode.get("spec") or {}).get("unschedulable")),
        health=str(status.get("health") or "Healthy"),
        health_detail=detail,
        problem=problem,
        other_path=other,
        defrag=parse_mark(
            ((gpunode.get("metadata") or {}).get("annotations") or {}).get(ANN_DEFRAG_MARK)
        ),
    )


def lease_renewals(leases: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """When each node's Lease was last renewed (epoch s), by node name; a Lease without a
    readable `spec.renewTime` is left out, as if missing."""
    renewed: dict[str, float] = {}
    for lease in leases:
        name = _name(lease)
        at = parse_time((lease.get("spec") or {}).get("renewTime"))
        if name and at is not None:
            renewed[name] = at
    return renewed


def node_condition(node: Mapping[str, Any], gpunode: Mapping[str, Any] | None) -> str | None:
    """Why placement must skip the node now, or None (`state.nodes.condition_of` on the JSON)."""
    return condition_of(read_node(node), None if gpunode is None else read_gpu_node(gpunode))


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
