"""NodePrepareResources and NodeUnprepareResources for `gpu.gpupool.io`: a pure plan, then disk.

`plan_claim` (pure) turns an allocated claim into what a container of it gets: it re-checks each
allocated card (on this node, healthy, the claim's memory within what the card gives after the
reserve and the claims already prepared on it) and builds the container's envs and mounts with
the device plugin's own `container_setup`, so a container started through a claim is the one the
device plugin's Allocate makes for a lease. `ClaimPreparer` then writes the limits file (the
device plugin's format and writer), the usage folder, the claim's CDI spec and, last, the
checkpoint; unprepare removes them in the opposite order. Both are idempotent: a repeated call, or
one after a restart halfway, finds the same names and ends in the same state.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT
from gpupool.domain.units import format_bytes
from gpupool.node.device_plugin.decide import PluginPaths, container_setup, limits_text
from gpupool.node.device_plugin.server import write_file_atomically
from gpupool.node.dra import cdi
from gpupool.node.dra.checkpoint import (
    CheckpointStore,
    PreparedCard,
    PreparedClaim,
    PreparedDevice,
)
from gpupool.node.dra.claims import AllocatedClaim, ClaimRef, read_allocated_claim
from gpupool.node.dra.errors import ClaimNotServable
from gpupool.node.dra.slices import device_name, memory_limit, pool_name
from gpupool.ports import Inventory, PodLease


class ClaimSourceUnavailable(Exception):
    """The API server cannot be asked for the claim now; the kubelet retries."""


class ClaimSource(Protocol):
    """Where the plugin reads a ResourceClaim the kubelet names (the API server, or a fake)."""

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The claim's JSON as the API server returns it; ClaimSourceUnavailable when it
        cannot be read now, ClaimNotServable when it does not exist."""
        ...


@dataclass(frozen=True, slots=True)
class PrepareSettings:
    node: str
    reserve_pct: float = DEFAULT_RESERVE_PCT
    paths: PluginPaths = field(default_factory=PluginPaths)
    cdi_dir: str = cdi.DEFAULT_CDI_DIR


def _claimed_on(prepared: Sequence[PreparedClaim], uid: str) -> dict[str, int]:
    """Bytes the other prepared claims hold on each card."""
    held: dict[str, int] = {}
    for other in prepared:
        if other.ref.uid == uid:
            continue
        for card in other.cards:
            held[card.uuid] = held.get(card.uuid, 0) + card.memory_bytes
    return held


def _card_for(claim: AllocatedClaim, device: str, gpus: Sequence[Gpu]) -> Gpu:
    by_name = {device_name(g): g for g in gpus}
    gpu = by_name.get(device)
    if gpu is None:
        here = ", ".join(sorted(by_name)) or "none"
        raise ClaimNotServable(
            f"claim {claim.ref}: device {device!r} is not on this node (devices here: {here}); "
            f"the card went away since the scheduler allocated it: delete the pod so the claim "
            f"is allocated again"
        )
    if not gpu.healthy:
        raise ClaimNotServable(
            f"claim {claim.ref}: card {gpu.uuid} (GPU {gpu.index}) is unhealthy; delete the pod "
            f"so the claim is allocated on another card"
        )
    return gpu


def plan_cards(
    claim: AllocatedClaim,
    node: str,
    gpus: Sequence[Gpu],
    prepared: Sequence[PreparedClaim],
    reserve_pct: float,
) -> tuple[PreparedCard, ...]:
    """Each card the claim holds and how much of it; refuses what the card cannot honour."""
    cards: dict[str, PreparedCard] = {}
    for result in claim.devices:
        if result.pool != pool_name(node):
            raise ClaimNotServable(
                f"claim {claim.ref}: device {result.device} is in pool {result.pool!r}, not this "
                f"node's ({pool_name(node)!r}); the kubelet of node {result.pool} must prepare it"
            )
        gpu = _card_for(claim, result.device, gpus)
        limit = memory_limit(gpu, reserve_pct)
        # no consumed memory recorded: the scheduler gave the whole device (consumable capacity
        # off), so the claim is capped at the whole card's share, never left uncapped
        memory = limit if result.memory_bytes is None else result.memory_bytes
        compute = result.compute_pct or 0  # 0: no hard cap
        before = cards.get(gpu.uuid)
        if before is not None:  # two requests of one claim on one card: one line, summed
            memory += before.memory_bytes
            capped = compute and before.compute_pct
            compute = min(100, compute + before.compute_pct) if capped else 0
        cards[gpu.uuid] = PreparedCard(gpu.uuid, gpu.index, gpu.model, memory, compute)
    held = _claimed_on(prepared, claim.ref.uid)
    for card in cards.values():
        gpu = next(g for g in gpus if g.uuid == card.uuid)
        limit = memory_limit(gpu, reserve_pct)
        others = held.get(card.uuid, 0)
        if others + card.memory_bytes > limit:
            raise ClaimNotServable(
                f"claim {claim.ref}: card {card.uuid} (GPU {card.index}) cannot honour "
                f"{format_bytes(card.memory_bytes)}: {format_bytes(max(limit - others, 0))} "
                f"free of {format_bytes(limit)} ({reserve_pct:g}% of the card kept in reserve, "
                f"{format_bytes(others)} prepared for other claims); the container would run out "
                f"of memory. Check that the cluster runs with DRAConsumableCapacity on"
            )
    return tuple(sorted(cards.values(), key=lambda c: c.index))


def plan_claim(
    claim: AllocatedClaim,
    gpus: Sequence[Gpu],
    prepared: Sequence[PreparedClaim],
    settings: PrepareSettings,
) -> PreparedClaim:
    """What preparing `claim` writes and answers. Pure: raises ClaimRefused subclasses."""
    if not claim.devices:
        raise ClaimNotServable(
            f"claim {claim.ref} has no device of this driver allocated; nothing to prepare"
        )
    cards = plan_cards(claim, settings.node, gpus, prepared, settings.reserve_pct)
    slices = tuple(
        Slice(c.index, c.uuid, c.model, 0, c.memory_bytes, c.compute_pct * 10) for c in cards
    )
    lease = PodLease(
        lease=str(claim.ref),
        pod=claim.pod,
        pod_uid=claim.pod_uid,
        node=settings.node,
        slices=slices,
        compute_mode=claim.compute_mode,
        mps_percentage=None,
    )
    # the allocation key the device plugin derives from device IDs names the files; a claim's
    # uid is as stable across repeats and restarts
    envs, mounts, limits_host, usage_host = container_setup(
        lease, (f"dra:{claim.ref.uid}",), settings.paths
    )
    cdi_devices: dict[str, cdi.CdiDevice] = {}
    devices = []
    uuid_of = {device_name(g): g.uuid for g in gpus}
    for result in claim.devices:
        name = cdi.cdi_device_name(claim.ref.uid, result.device)
        cdi_devices.setdefault(name, cdi.CdiDevice(name, result.device, uuid_of[result.device]))
        devices.append(
            PreparedDevice(
                request=result.request,
                pool=result.pool,
                device=result.device,
                share_id=result.share_id,
                cdi_device_id=cdi_devices[name].qualified,
            )
        )
    spec = cdi.claim_spec(tuple(cdi_devices.values()), envs, mounts)
    return PreparedClaim(
        ref=claim.ref,
        devices=tuple(devices),
        cards=cards,
        limits_path=limits_host,
        limits_text=limits_text(slices),
        usage_path=usage_host,
        cdi_path=str(Path(settings.cdi_dir) / cdi.spec_file_name(claim.ref.uid)),
        cdi_text=cdi.render(spec),
    )


def _write_files(claim: PreparedClaim) -> None:
    """The claim's files, as its checkpoint says; rewritten only where missing or different."""
    for path, text in ((claim.limits_path, claim.limits_text), (claim.cdi_path, claim.cdi_text)):
        target = Path(path)
        if not target.is_file() or target.read_text() != text:
            write_file_atomically(target, text)
    usage = Path(claim.usage_path)
    usage.mkdir(parents=True, exist_ok=True)
    usage.chmod(0o777)  # the container's processes may run as any user (as the device plugin)


class ClaimPreparer:
    """Prepares and unprepares claims on this node, keeping a checkpoint per prepared claim.

    Not safe for concurrent calls on its own: the plugin holds one lock around each call, so the
    room check of one claim sees the claims prepared before it.
    """

    def __init__(
        self,
        settings: PrepareSettings,
        inventory: Inventory,
        source: ClaimSource,
        store: CheckpointStore,
    ) -> None:
        self.settings = settings
        self.inventory = inventory
        self.source = source
        self.store = store
        self._prepared = {c.ref.uid: c for c in store.load_all()}

    @property
    def prepared(self) -> tuple[PreparedClaim, ...]:
        return tuple(self._prepared.values())

    async def prepare(self, ref: ClaimRef) -> PreparedClaim:
        done = self._prepared.get(ref.uid)
        if done is None:
            raw = await self.source.get_claim(ref.namespace, ref.name)
            claim = read_allocated_claim(raw, ref.uid)
            done = plan_claim(claim, self.inventory.devices(), self.prepared, self.settings)
        _write_files(done)
        self.store.save(done)
        self._prepared[ref.uid] = done
        return done

    def unprepare(self, uid: str) -> bool:
        """Remove the claim's files and checkpoint; False when it was not prepared here."""
        done = self._prepared.get(uid)
        if done is None:
            return False
        for path in (done.cdi_path, done.limits_path):
            with contextlib.suppress(FileNotFoundError):
                Path(path).unlink()
        shutil.rmtree(done.usage_path, ignore_errors=True)
        self.store.remove(uid)
        del self._prepared[uid]
        return True
