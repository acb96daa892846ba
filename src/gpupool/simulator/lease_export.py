"""A replay's leases as the GpuLeases a cluster would hold, for `gpupool usage` on a replayed
workload (`gpupool simulate replay --export-leases`).

`ExportingEngine` is the replay engine that also keeps each lease that ends (released,
reclaimed, or moved by defragmentation: the engine's one leaving path, `_end`) with where it was
placed; `gpulease_json` writes one as a GpuLease in the tenant's namespace, for a pod named after
the job, its devices the cards it held, its times the replay's seconds as epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gpupool.adapters.wire.names import API_VERSION
from gpupool.placement import Decision
from gpupool.quota.lease import Lease
from gpupool.rfc3339 import format_time
from gpupool.simulator.replay import Engine, _Running

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class EndedLease:
    lease: Lease  # as admitted; it held from reserved_at to `ended_at`
    ended_at: float
    decision: Decision
    devices: tuple[tuple[int, str, str], ...]  # (index, uuid, model) of each card it held


@dataclass(slots=True)
class ExportingEngine(Engine):
    ended: list[EndedLease] = field(default_factory=list)

    def end(self, key: str, how: Literal["release", "reclaim"], freed: set[int]) -> _Running | None:
        run = Engine.end(self, key, how, freed)  # (slots: no zero-argument super)
        if run is not None:
            gpus = self.snap.nodes[run.decision.node_index].gpus
            devices = tuple(
                (gpus[c].index, gpus[c].uuid, gpus[c].model) for c in run.decision.cards
            )
            self.ended.append(EndedLease(run.lease, self.now, run.decision, devices))
        return run


def gpulease_json(ended: EndedLease) -> Json:
    lease, decision = ended.lease, ended.decision
    job = lease.id.rsplit("@", 1)[0]
    name = "replay-" + lease.id.replace("@", "-").replace("_", "-").lower()
    held = zip(ended.devices, decision.offsets, decision.mem_bytes, strict=True)
    devices = [
        {"index": index, "uuid": uuid, "model": model, "offsetBytes": offset, "sizeBytes": size}
        for (index, uuid, model), offset, size in held
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "GpuLease",
        "metadata": {"name": name, "namespace": lease.tenant},
        "spec": {
            "tenant": lease.tenant,
            "podRef": {"namespace": lease.tenant, "name": job, "uid": name},
            "node": decision.node,
            "devices": devices,
            "amount": lease.amount,
        },
        "status": {
            "phase": "Released",
            "start": format_time(lease.reserved_at),
            "end": format_time(ended.ended_at),
        },
    }
