"""A Kubernetes Node and its GpuNode as typed values, and what placement makes of the pair.

`adapters.kubernetes.node` decodes the JSON (once, as it arrives); `node_of` and `condition_of`
combine a node with its GpuNode into the domain `Node` placement reads and the reason placement
must skip it now. The GpuNode (written by the node agent) is the truth about a node's cards; a
node without one falls back on the cards its labels describe (the dev cluster's fake nodes).
A value that could not be read carries `problem` instead of being dropped, so the extender can
say why it cannot use the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.domain.devices import Gpu, Node
from gpupool.domain.errors import GpupoolError

PREFER_NO_SCHEDULE = "PreferNoSchedule"  # a taint effect kube-scheduler scores, not filters


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeObject:
    """What gpupool reads from a Node: identity, scheduling state and the labels' cards."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    cordoned: bool = False
    not_ready: str | None = None  # why the Ready condition is not True (None: ready)
    label_gpus: tuple[Gpu, ...] = ()  # cards described by gpupool.io/gpu-* labels
    problem: str | None = None  # the labels' cards could not be read (and why)
    address: str | None = None  # its InternalIP, else its first address (the agent's /metrics)


@dataclass(frozen=True, slots=True)
class DefragMark:
    """Cards of a node that a defragmentation round of GpuPool `pool` is clearing (GPU indices,
    as the GpuNode reports them): they take no new slices from `since` until the controller
    removes the mark (at `until` at the latest, when the round times out)."""

    pool: str
    since: float
    until: float
    gpus: tuple[int, ...]

    def note(self, node: str) -> str:
        cards = ", ".join(str(g) for g in self.gpus)
        return (
            f"node {node}: GPU {cards} being cleared by defragmentation (GpuPool {self.pool}); "
            f"they take no new slices"
        )


@dataclass(frozen=True, slots=True)
class GpuNodeObject:
    """What gpupool reads from a GpuNode: the node's cards as the agent reports them, health."""

    name: str
    gpus: tuple[Gpu, ...] = ()
    unschedulable: bool = False  # spec.unschedulable: gpupool placement cordoned here
    health: str = "Healthy"  # Healthy | Suspect | Lost (the controller's node health)
    health_detail: str = ""  # the Heartbeat/Ready condition's message
    problem: str | None = None  # the devices could not be read (and why)
    defrag: DefragMark | None = None  # annotation gpupool.io/defrag (the controller's)
    # the agent's OtherGpuPath condition, when True: which other path hands out these cards
    other_path: str | None = None


def node_of(node: NodeObject, gpunode: GpuNodeObject | None) -> Node:
    """The domain Node placement reads (no cpu or memory: kube-scheduler places those).

    GpupoolError when its cards cannot be read or make no valid node."""
    problem = gpunode.problem if gpunode is not None else node.problem
    if problem is not None:
        raise GpupoolError(problem)
    gpus = gpunode.gpus if gpunode is not None else node.label_gpus
    try:
        return Node(name=node.name, cpu_milli=0, memory_mib=0, gpus=gpus)
    except GpupoolError as err:
        raise GpupoolError(f"Node {node.name}: {err}") from None


def condition_of(node: NodeObject, gpunode: GpuNodeObject | None) -> str | None:
    """Why placement must skip the node now, or None."""
    if node.cordoned:
        return "node is cordoned"
    if node.not_ready is not None:
        return f"node not ready: {node.not_ready}"
    if gpunode is not None:
        if gpunode.unschedulable:
            return "gpupool placement cordoned on this node (GpuNode spec.unschedulable)"
        if gpunode.health in ("Suspect", "Lost"):
            detail = f": {gpunode.health_detail}" if gpunode.health_detail else ""
            return f"node {gpunode.health.lower()}{detail or ': no recent agent heartbeat'}"
    return None
