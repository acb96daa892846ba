"""What to answer for one container of a kubelet Allocate: pure, no I/O, no gRPC.

The servicer gathers the inputs (the device IDs, the node's cards, the leases placed on the node),
calls `decide_allocation`, and then does what the verdict says: write the limits file, record the
devices on the lease, answer the kubelet, or fail with the refusal's message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.errors import GpupoolError, InvalidRequest
from gpupool.domain.models import get_model
from gpupool.domain.reserve import allocatable_bytes
from gpupool.domain.units import format_bytes
from gpupool.node.device_plugin.devices import card_of
from gpupool.node.limiter_usage import FILE_NAME as USAGE_FILE_NAME
from gpupool.ports import PodLease

MPS = "mps"


@dataclass(frozen=True, slots=True)
class PluginPaths:
    """Where things live on the host and inside the container."""

    limiter_host: str = "/usr/local/lib/gpupool/libgpupool.so"
    limiter_container: str = "/usr/local/gpupool/lib/libgpupool.so"
    limits_host_dir: str = "/var/lib/gpupool/limits"
    limits_container: str = "/etc/gpupool/limits"
    # the limiter's accounting file lives in a folder per container here, so the agent reads it
    usage_host_dir: str = "/var/lib/gpupool/usage"
    usage_container: str = "/run/gpupool/usage"
    mps_pipe_host: str = "/tmp/nvidia-mps"
    mps_pipe_container: str = "/tmp/nvidia-mps"
    # "env": LD_PRELOAD; "file": mount a one-line ld.so.preload (survives `env -i`, fresh shells)
    preload: str = "env"
    ld_so_preload_host: str = "/var/lib/gpupool/ld.so.preload"


@dataclass(frozen=True, slots=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class Grant:
    """Allocate succeeds: write `limits_text` to `limits_host_path`, make the container's
    `usage_host_path` folder (the limiter's accounting), record, answer."""

    lease: PodLease
    device_ids: tuple[str, ...]
    envs: Mapping[str, str]
    mounts: tuple[MountSpec, ...]
    limits_host_path: str
    limits_text: str
    usage_host_path: str
    already_recorded: bool  # a repeated Allocate: the lease already names these devices


@dataclass(frozen=True, slots=True)
class Refusal:
    """Allocate fails: `code` is a gRPC status name, `message` says what is wrong and why."""

    code: str  # "FAILED_PRECONDITION" | "INVALID_ARGUMENT"
    message: str


def limits_text(slices: Sequence[Slice]) -> str:
    """The limiter's limits file (native/src/config.c): one line per card, `<uuid> <bytes> [pct]`.

    Lines name the card by uuid rather than by index, so the limit follows the card even if the
    container reorders devices with CUDA_VISIBLE_DEVICES. The compute share is left out when the
    slice has no hard cap.
    """
    lines = []
    for piece in slices:
        percent = piece.compute_milli // 10
        line = f"{piece.uuid} {piece.size_bytes}"
        lines.append(f"{line} {percent}" if percent else line)
    return "\n".join(lines) + "\n"


def allocation_key(device_ids: Sequence[str]) -> str:
    """A name per allocation, from its devices: a repeated Allocate finds the same files, and
    the agent finds a lease's usage folder from the lease's recorded device IDs."""
    return hashlib.sha256("\n".join(sorted(device_ids)).encode()).hexdigest()[:24]


def limits_file_name(device_ids: Sequence[str]) -> str:
    return f"{allocation_key(device_ids)}.limits"


def _same_shape(a: PodLease, b: PodLease) -> bool:
    """Two leases a container could not tell apart (same slices per card, same compute mode)."""

    def shape(lease: PodLease) -> tuple[object, ...]:
        return (
            lease.compute_mode,
            tuple(sorted((s.uuid, s.size_bytes, s.compute_milli) for s in lease.slices)),
        )

    return shape(a) == shape(b)


def _describe(leases: Sequence[PodLease]) -> str:
    return "; ".join(f"{x.lease} (pod {x.pod}) on {', '.join(x.card_uuids)}" for x in leases)


def lease_missing(device_ids: Sequence[str], leases: Sequence[PodLease]) -> bool:
    """No lease here is bound to exactly these devices, nor waits for their cards: the pod's
    lease may not stand yet (the extender creates it just after the pod's Binding)."""
    try:
        cards = {card_of(i) for i in device_ids}
    except InvalidRequest:
        return False  # refused as it is
    wanted = set(device_ids)
    return not any(
        set(x.device_ids) == wanted if x.device_ids else set(x.card_uuids) == cards for x in leases
    )


def find_lease(
    node: str, device_ids: Sequence[str], leases: Sequence[PodLease]
) -> PodLease | Refusal:
    """The lease these devices serve: the one bound to them, else the one waiting for them."""
    try:
        cards = tuple(dict.fromkeys(card_of(i) for i in device_ids))
    except InvalidRequest as err:
        return Refusal("INVALID_ARGUMENT", str(err))
    if not device_ids:
        return Refusal("INVALID_ARGUMENT", "Allocate named no devices")
    wanted = set(device_ids)
    bound = [x for x in leases if x.device_ids and set(x.device_ids) == wanted]
    if len(bound) == 1:
        return bound[0]
    if len(bound) > 1:
        return Refusal(
            "FAILED_PRECONDITION",
            f"devices {', '.join(device_ids)} are recorded on several leases: {_describe(bound)}",
        )
    if len(cards) != len(device_ids):
        return Refusal(
            "FAILED_PRECONDITION",
            f"the kubelet chose {len(device_ids)} devices on only {len(cards)} card(s) "
            f"({', '.join(device_ids)}); each GPU of a gpupool pod must be a different card",
        )
    waiting = [x for x in leases if not x.device_ids and set(x.card_uuids) == set(cards)]
    waiting.sort(key=lambda x: x.lease)
    if not waiting:
        awaiting = [x for x in leases if not x.device_ids]
        known = (
            f"leases here still waiting for devices: {_describe(awaiting)}"
            if awaiting
            else ("no lease here is waiting for devices")
        )
        return Refusal(
            "FAILED_PRECONDITION",
            f"no gpupool lease on node {node} holds card(s) {', '.join(cards)} for devices "
            f"{', '.join(device_ids)}; {known}. A pod gets gpupool.io/vgpu only through "
            f"gpupool's scheduler extender, which writes its lease as it binds the pod",
        )
    first = waiting[0]
    if any(not _same_shape(first, other) for other in waiting[1:]):
        return Refusal(
            "FAILED_PRECONDITION",
            f"devices {', '.join(device_ids)} could serve several different leases "
            f"({_describe(waiting)}); refusing to guess which pod this container belongs to",
        )
    return first


def check_cards(
    lease: PodLease, gpus: Sequence[Gpu], leases: Sequence[PodLease], reserve_pct: float
) -> Refusal | None:
    """Re-check each card of the lease: here, the model the lease expects, healthy, and room."""
    by_uuid = {g.uuid: g for g in gpus}
    for piece in lease.slices:
        gpu = by_uuid.get(piece.uuid)
        if gpu is None:
            here = ", ".join(g.uuid for g in gpus) or "none"
            return Refusal(
                "FAILED_PRECONDITION",
                f"lease {lease.lease}: card {piece.uuid} is not on this node (cards here: {here})",
            )
        try:
            expected = get_model(piece.model).name
        except GpupoolError:
            expected = piece.model
        if expected != gpu.model:
            return Refusal(
                "FAILED_PRECONDITION",
                f"lease {lease.lease}: card {piece.uuid} is a {gpu.model}, not the {piece.model} "
                f"the lease was placed on",
            )
        if not gpu.healthy:
            return Refusal(
                "FAILED_PRECONDITION",
                f"lease {lease.lease}: card {piece.uuid} (GPU {gpu.index}) is unhealthy; the pod "
                f"cannot start on it and must be placed again",
            )
        total = gpu.total_memory
        if total is None:
            return Refusal(
                "FAILED_PRECONDITION",
                f"lease {lease.lease}: card {piece.uuid} has no known memory size to check against",
            )
        room = allocatable_bytes(total, reserve_pct)
        granted = sum(
            s.size_bytes
            for other in leases
            if other.lease != lease.lease and other.device_ids
            for s in other.slices
            if s.uuid == piece.uuid
        )
        if granted + piece.size_bytes > room:
            return Refusal(
                "FAILED_PRECONDITION",
                f"lease {lease.lease}: card {piece.uuid} (GPU {gpu.index}) cannot honour "
                f"{format_bytes(piece.size_bytes)}: {format_bytes(max(room - granted, 0))} free of "
                f"{format_bytes(room)} allocatable ({reserve_pct:g}% of {format_bytes(total)} kept "
                f"in reserve, {format_bytes(granted)} granted to other pods); the container would "
                f"run out of memory",
            )
    return None


def container_setup(
    lease: PodLease, device_ids: Sequence[str], paths: PluginPaths
) -> tuple[dict[str, str], tuple[MountSpec, ...], str, str]:
    """Envs, mounts, the limits file's and the usage folder's host paths for a container of
    `lease`. The usage folder is the container's own and writable: the limiter keeps the
    accounting of the container's processes there, and the agent reads it for /metrics."""
    limits_host = str(PurePosixPath(paths.limits_host_dir) / limits_file_name(device_ids))
    usage_host = str(PurePosixPath(paths.usage_host_dir) / allocation_key(device_ids))
    envs = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(lease.card_uuids),
        "GPUPOOL_LIMITS_FILE": paths.limits_container,
        "GPUPOOL_SHARED_FILE": str(PurePosixPath(paths.usage_container) / USAGE_FILE_NAME),
        "GPUPOOL_LEASE": lease.lease,
    }
    mounts = [
        MountSpec(paths.limiter_container, paths.limiter_host, True),
        MountSpec(paths.limits_container, limits_host, True),
        MountSpec(paths.usage_container, usage_host, False),
    ]
    if paths.preload == "file":
        mounts.append(MountSpec("/etc/ld.so.preload", paths.ld_so_preload_host, True))
    else:
        envs["LD_PRELOAD"] = paths.limiter_container
    if lease.compute_mode == MPS:
        # the lease's percentage (bind decided it: the pod's share, else the operators' default),
        # else, for a lease made before it was recorded, the slices' compute share
        percents = [s.compute_milli // 10 for s in lease.slices]
        percent = lease.mps_percentage or min(percents) or 100
        envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
        envs["CUDA_MPS_PIPE_DIRECTORY"] = paths.mps_pipe_container
        mounts.append(MountSpec(paths.mps_pipe_container, paths.mps_pipe_host, False))
    return envs, tuple(mounts), limits_host, usage_host


def decide_allocation(
    *,
    node: str,
    device_ids: Sequence[str],
    gpus: Sequence[Gpu],
    leases: Sequence[PodLease],
    reserve_pct: float,
    paths: PluginPaths,
) -> Grant | Refusal:
    """Decide one container's Allocate: which lease, can its cards honour it, what to set."""
    found = find_lease(node, device_ids, leases)
    if isinstance(found, Refusal):
        return found
    lease = found
    if len(lease.slices) != len(device_ids):
        return Refusal(
            "FAILED_PRECONDITION",
            f"lease {lease.lease} holds {len(lease.slices)} GPU(s) but the container was given "
            f"{len(device_ids)} gpupool.io/vgpu device(s)",
        )
    refusal = check_cards(lease, gpus, leases, reserve_pct)
    if refusal is not None:
        return refusal
    envs, mounts, limits_host, usage_host = container_setup(lease, device_ids, paths)
    return Grant(
        lease=lease,
        device_ids=tuple(device_ids),
        envs=envs,
        mounts=mounts,
        limits_host_path=limits_host,
        limits_text=limits_text(lease.slices),
        usage_host_path=usage_host,
        already_recorded=set(lease.device_ids) == set(device_ids),
    )
