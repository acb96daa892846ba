"""What the DRA plugin has prepared, as values, and their checkpoint files on disk.

One JSON file per prepared claim (`<state dir>/<claim uid>.json`), written atomically after the
claim's limits file and CDI spec, removed after them at unprepare. It holds everything the
plugin answered and wrote, so a restarted agent answers a repeated NodePrepareResources the same
way, puts back a file that went missing, knows what each card already holds, and can clean up a
claim whose pods ended while it was down.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.node.device_plugin.server import write_file_atomically
from gpupool.node.dra.claims import ClaimRef
from gpupool.node.dra.errors import CheckpointCorrupt

FORMAT = 1


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocation result: what the kubelet is told about it."""

    request: str
    pool: str
    device: str
    share_id: str | None
    cdi_device_id: str  # fully qualified: gpu.gpupool.io/claim=<claim uid>-<device>


@dataclass(frozen=True, slots=True)
class PreparedCard:
    """One card of the claim and what the claim holds of it (the limits file's line)."""

    uuid: str
    index: int
    model: str
    memory_bytes: int
    compute_pct: int  # 0: no hard cap


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    ref: ClaimRef
    devices: tuple[PreparedDevice, ...]
    cards: tuple[PreparedCard, ...]
    limits_path: str
    limits_text: str
    usage_path: str
    cdi_path: str
    cdi_text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "claim": {"namespace": self.ref.namespace, "name": self.ref.name, "uid": self.ref.uid},
            "devices": [
                {
                    "request": d.request,
                    "pool": d.pool,
                    "device": d.device,
                    "shareID": d.share_id,
                    "cdiDeviceID": d.cdi_device_id,
                }
                for d in self.devices
            ],
            "cards": [
                {
                    "uuid": c.uuid,
                    "index": c.index,
                    "model": c.model,
                    "memoryBytes": c.memory_bytes,
                    "computePercent": c.compute_pct,
                }
                for c in self.cards
            ],
            "limitsPath": self.limits_path,
            "limitsText": self.limits_text,
            "usagePath": self.usage_path,
            "cdiPath": self.cdi_path,
            "cdiText": self.cdi_text,
        }

    @classmethod
    def from_json(cls, raw: Any, source: str) -> PreparedClaim:
        try:
            if raw.get("format") != FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, this agent reads {FORMAT}")
            claim = raw["claim"]
            return cls(
                ref=ClaimRef(str(claim["namespace"]), str(claim["name"]), str(claim["uid"])),
                devices=tuple(
                    PreparedDevice(
                        request=str(d["request"]),
                        pool=str(d["pool"]),
                        device=str(d["device"]),
                        share_id=None if d.get("shareID") is None else str(d["shareID"]),
                        cdi_device_id=str(d["cdiDeviceID"]),
                    )
                    for d in raw["devices"]
                ),
                cards=tuple(
                    PreparedCard(
                        uuid=str(c["uuid"]),
                        index=int(c["index"]),
                        model=str(c["model"]),
                        memory_bytes=int(c["memoryBytes"]),
                        compute_pct=int(c["computePercent"]),
                    )
                    for c in raw["cards"]
                ),
                limits_path=str(raw["limitsPath"]),
                limits_text=str(raw["limitsText"]),
                usage_path=str(raw["usagePath"]),
                cdi_path=str(raw["cdiPath"]),
                cdi_text=str(raw["cdiText"]),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise CheckpointCorrupt(
                f"{source}: not a DRA checkpoint this agent can read ({type(err).__name__}: "
                f"{err}); move it away and unprepare the claim's files by hand, or restore it"
            ) from None


class CheckpointStore:
    """The checkpoint folder: one file per prepared claim, named by its uid."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, uid: str) -> Path:
        return self.folder / f"{uid.replace('/', '_')}.json"

    def save(self, claim: PreparedClaim) -> None:
        text = json.dumps(claim.to_json(), indent=1, sort_keys=True) + "\n"
        write_file_atomically(self.path(claim.ref.uid), text, mode=0o600)

    def remove(self, uid: str) -> None:
        path = self.path(uid)
        if path.exists():
            path.unlink()
            fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(fd)  # the removal survives a crash: no claim comes back prepared
            finally:
                os.close(fd)

    def load_all(self) -> Iterator[PreparedClaim]:
        """Every checkpoint, in name order; CheckpointCorrupt names the first unreadable one."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("*.json")):
            try:
                raw = json.loads(path.read_text())
            except (OSError, ValueError) as err:
                raise CheckpointCorrupt(
                    f"{path}: not a DRA checkpoint this agent can read ({err}); move it away and "
                    f"unprepare the claim's files by hand, or restore it"
                ) from None
            yield PreparedClaim.from_json(raw, str(path))
