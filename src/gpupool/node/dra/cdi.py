"""The CDI spec of one prepared claim: pure, what the container gets in, JSON out, and back.

The container runtime (containerd with CDI, CRI-O) applies a CDI spec's edits to each container
whose CRI request names one of its devices. A prepared claim gets one transient spec file
(`<vendor>-<class>_<claim uid>.json`, the name the CDI library gives transient specs), kind
`gpu.gpupool.io/claim`, with:

- the claim's edits at the spec level: the same envs and mounts the device plugin's Allocate gives
  a container of a lease (`NVIDIA_VISIBLE_DEVICES` = the claim's cards, the limiter and its
  preload, the limits file, the usage folder, the MPS settings). The runtime applies spec-level
  edits once per container however many of the spec's devices it names, so a container that uses
  two cards of one claim gets them once;
- one device per allocated card, `<claim uid>-<device>`, which the kubelet names to the runtime;
  its own edit only says which card it is (`GPUPOOL_DRA_<DEVICE>=<card uuid>`).

Version 0.6.0: env and mounts need no newer one, and it is what containerd 1.7's and 2.x's CDI
libraries both read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.names import DRA_CDI_KIND
from gpupool.domain.errors import GpupoolError
from gpupool.node.device_plugin.decide import MountSpec

CDI_VERSION = "0.6.0"
DEFAULT_CDI_DIR = "/var/run/cdi"  # the CDI library's default dynamic (generated) spec folder

_VENDOR, _, _CLASS = DRA_CDI_KIND.partition("/")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


class InvalidCdiSpec(GpupoolError):
    """A CDI spec on disk is not one gpupool wrote; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One card of the claim: its CDI device name and the card's uuid."""

    name: str  # <claim uid>-<device>
    device: str  # the ResourceSlice device name, gpu-<index>
    card_uuid: str

    @property
    def qualified(self) -> str:
        """The fully qualified CDI device ID the kubelet hands to the runtime."""
        return f"{DRA_CDI_KIND}={self.name}"


def cdi_device_name(claim_uid: str, device: str) -> str:
    name = f"{claim_uid}-{device}"
    if not _DEVICE_NAME.match(name):
        raise InvalidCdiSpec(
            f"CDI device name {name!r} (claim uid {claim_uid!r}, device {device!r}) has characters "
            f"CDI does not allow"
        )
    return name


def spec_file_name(claim_uid: str) -> str:
    """The transient spec's file name for a claim (the CDI library's GenerateTransientSpecName)."""
    return f"{_VENDOR}-{_CLASS}_{claim_uid.replace('/', '_')}.json"


def _mount(m: MountSpec) -> dict[str, Any]:
    return {
        "hostPath": m.host_path,
        "containerPath": m.container_path,
        "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"],
    }


def _card_env(device: CdiDevice) -> str:
    key = re.sub(r"[^A-Za-z0-9]", "_", device.device).upper()
    return f"GPUPOOL_DRA_{key}={device.card_uuid}"


def claim_spec(
    devices: Sequence[CdiDevice], envs: Mapping[str, str], mounts: Sequence[MountSpec]
) -> dict[str, Any]:
    """The CDI spec of one claim: the container's envs and mounts, one device per card."""
    if not devices:
        raise InvalidCdiSpec("a CDI spec needs at least one device")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": DRA_CDI_KIND,
        "containerEdits": {
            "env": [f"{k}={v}" for k, v in envs.items()],
            "mounts": [_mount(m) for m in mounts],
        },
        "devices": [{"name": d.name, "containerEdits": {"env": [_card_env(d)]}} for d in devices],
    }


def render(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, indent=2, sort_keys=False) + "\n"


@dataclass(frozen=True, slots=True)
class ClaimCdi:
    """A claim's CDI spec read back: its device names, envs and mounts."""

    device_names: tuple[str, ...]
    envs: dict[str, str]
    mounts: tuple[MountSpec, ...]


def read_spec(text: str, source: str) -> ClaimCdi:
    """A spec gpupool wrote, read back (the plugin on restart, tests); InvalidCdiSpec names
    `source` and what is wrong."""
    try:
        raw = json.loads(text)
        if raw.get("cdiVersion") != CDI_VERSION or raw.get("kind") != DRA_CDI_KIND:
            raise ValueError(
                f"cdiVersion {raw.get('cdiVersion')!r} kind {raw.get('kind')!r}, expected "
                f"{CDI_VERSION!r} {DRA_CDI_KIND!r}"
            )
        edits = raw.get("containerEdits") or {}
        envs = dict(str(e).split("=", 1) for e in edits.get("env") or [])
        mounts = tuple(
            MountSpec(
                container_path=str(m["containerPath"]),
                host_path=str(m["hostPath"]),
                read_only="ro" in (m.get("options") or []),
            )
            for m in edits.get("mounts") or []
        )
        names = tuple(str(d["name"]) for d in raw.get("devices") or [])
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise InvalidCdiSpec(f"{source}: not a gpupool CDI spec: {err}") from None
    if not names:
        raise InvalidCdiSpec(f"{source}: the spec lists no devices")
    bad = [n for n in names if not _DEVICE_NAME.match(n)]
    if bad:
        raise InvalidCdiSpec(f"{source}: device names CDI does not allow: {', '.join(bad)}")
    return ClaimCdi(names, envs, mounts)
