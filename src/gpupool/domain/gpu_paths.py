"""Which paths hand out a node's cards, and what gpupool does when one is not its own.

A card must be handed out by one booker. gpupool books every slice in a GpuLease, whether the
extender placed the pod (its device plugin, `gpupool.io/vgpu`) or the claim allocator placed a
claim (its DRA driver, `gpu.gpupool.io`): both plan on the same cache of leases, so gpupool's own
two paths on one node do not double-book (docs/dra.md, "One node, which path"). Any other path
(NVIDIA's or HAMi's device plugin advertising `nvidia.com/gpu` on the Node, another DRA driver's
ResourceSlice naming GPUs on the node) is placed by kube-scheduler alone, which knows nothing of
gpupool's leases, and gpupool cannot tell which cards it took: a device plugin's choice is known
only to the kubelet, and the Node says only how many. So gpupool refuses the node (places nothing
new on it) rather than count a number it cannot pin to cards; `find_paths` decides, the agent
says so (GpuNode condition, Event, metric) and placement reads the condition.

Pure: what the Node advertises and the ResourceSlices on it come in as values; the names that
mark another path (resource prefixes, gpupool's own names) come in from the caller.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum


class PathKind(Enum):
    DEVICE_PLUGIN = "device plugin"
    DRA_DRIVER = "DRA driver"


@dataclass(frozen=True, slots=True)
class PublishedSlice:
    """One ResourceSlice on the node, as far as the decision needs it: who publishes it, and
    its devices' card uuids (empty where a device names none)."""

    name: str
    driver: str
    devices: int
    uuids: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class OtherPath:
    """A path that is not gpupool's handing out GPUs on the node: a device plugin's resource
    (`name` the resource, `amount` the devices the Node advertises) or a DRA driver (`name` the
    driver, `amount` its devices on the node, `slices` the ResourceSlices)."""

    kind: PathKind
    name: str
    amount: int
    slices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind is PathKind.DEVICE_PLUGIN:
            return f"device plugin resource {self.name} ({self.amount} on the Node)"
        where = ", ".join(self.slices)
        return f"DRA driver {self.name} ({self.amount} device(s) in ResourceSlice {where})"


@dataclass(frozen=True, slots=True)
class GpupoolPaths:
    """gpupool's own paths on the node: its device plugin's resource advertised on the Node, and
    its DRA driver's ResourceSlice."""

    device_plugin: bool
    dra: bool

    @property
    def both(self) -> bool:
        return self.device_plugin and self.dra


@dataclass(frozen=True, slots=True)
class PathFinding:
    """The decision for one node: the other paths found (empty: none), gpupool's own, and, when
    refused, the message that says what to do."""

    node: str
    others: tuple[OtherPath, ...]
    own: GpupoolPaths

    @property
    def refused(self) -> bool:
        """gpupool places nothing new on a node whose cards another path also hands out."""
        return bool(self.others)

    @property
    def kinds(self) -> frozenset[PathKind]:
        return frozenset(p.kind for p in self.others)

    def message(self) -> str:
        if not self.others:
            return f"only gpupool hands out the cards of node {self.node} ({self.own_text()})"
        found = "; ".join(p.describe() for p in self.others)
        fixes = []
        if PathKind.DEVICE_PLUGIN in self.kinds:
            fixes.append(
                "remove the other device plugin from this node (NVIDIA's GPU Operator: label the "
                "node nvidia.com/gpu.deploy.device-plugin=false; HAMi: remove its "
                "gpu=on label), or, to leave the node to it, stop gpupool's agent there"
            )
        if PathKind.DRA_DRIVER in self.kinds:
            fixes.append(
                "stop the other DRA driver's kubelet plugin on this node (its DaemonSet's "
                "nodeSelector) so its ResourceSlice goes, or stop gpupool's agent there"
            )
        return (
            f"another path hands out the GPUs of node {self.node}: {found}. gpupool cannot see "
            f"which cards it takes, so it places no new pod or claim here until it is gone: "
            f"{'; '.join(fixes)}"
        )

    def own_text(self) -> str:
        if self.own.both:
            return (
                "its device plugin and its DRA driver, both booking through GpuLeases on one "
                "cache, so no card is handed out twice"
            )
        if self.own.dra:
            return "its DRA driver"
        return "its device plugin"


def _count(value: int | None) -> int:
    return value if value is not None and value > 0 else 0


def find_paths(
    node: str,
    advertised: Mapping[str, int],
    slices: Sequence[PublishedSlice],
    *,
    own_resources: Collection[str],
    own_driver: str,
    gpu_resource_prefixes: Sequence[str],
    card_uuids: Collection[str] = (),
) -> PathFinding:
    """The paths handing out `node`'s cards.

    `advertised`: the Node's extended resources, the larger of capacity and allocatable (a
    device plugin that stopped leaves its resource at 0, which is no path). A resource is
    another device plugin's when it starts with one of `gpu_resource_prefixes` and is not one of
    `own_resources`. A ResourceSlice is another DRA driver's GPUs when its driver is not
    `own_driver` and one of its devices names a card of this node by uuid, or, naming none,
    its driver's name says gpu (a NIC's driver is no GPU path)."""
    others: list[OtherPath] = []
    for name in sorted(advertised):
        amount = _count(advertised[name])
        if amount and name not in own_resources and name.startswith(tuple(gpu_resource_prefixes)):
            others.append(OtherPath(PathKind.DEVICE_PLUGIN, name, amount))
    cards = frozenset(card_uuids)
    by_driver: dict[str, list[PublishedSlice]] = {}
    own_dra = False
    for piece in slices:
        if piece.driver == own_driver:
            own_dra = own_dra or piece.devices > 0
            continue
        names_card = bool(piece.uuids & cards)
        gpu_driver = not piece.uuids and "gpu" in piece.driver.lower()
        if piece.devices > 0 and (names_card or gpu_driver):
            by_driver.setdefault(piece.driver, []).append(piece)
    for driver in sorted(by_driver):
        found = sorted(by_driver[driver], key=lambda s: s.name)
        others.append(
            OtherPath(
                PathKind.DRA_DRIVER,
                driver,
                sum(s.devices for s in found),
                tuple(s.name for s in found),
            )
        )
    own_plugin = any(_count(advertised.get(name)) for name in own_resources)
    return PathFinding(node, tuple(others), GpupoolPaths(own_plugin, own_dra))
