"""Node health from the GpuNode heartbeat, pure: Suspect after `suspect_s` without one, Lost after
`lost_s`; a Lost node's live leases become Lost (metered to now) and their pods are deleted so
their owners (Deployments, Jobs) replace them on healthy nodes. A node that heartbeats again is
Healthy again (the agent then reports its cards' own health)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.times import parse_time
from gpupool.controllers.lease_plan import LIVE, LeaseView

SUSPECT_S = 90.0
LOST_S = 180.0


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    heartbeat: float | None
    health: str


def read_gpu_node(obj: Mapping[str, Any]) -> NodeView:
    status = obj.get("status") or {}
    return NodeView(
        name=str((obj.get("metadata") or {}).get("name") or ""),
        heartbeat=parse_time(status.get("heartbeat")),
        health=str(status.get("health") or "Healthy"),
    )


@dataclass(frozen=True, slots=True)
class SetHealth:
    node: str
    health: str
    message: str


@dataclass(frozen=True, slots=True)
class LoseLease:
    lease: LeaseView
    message: str
    gib_hours: float


@dataclass(frozen=True, slots=True)
class HealthPlan:
    health: tuple[SetHealth, ...]
    lose: tuple[LoseLease, ...]
    delete_pods: tuple[tuple[str, str], ...]  # (namespace, name) of pods on lost nodes


def plan_node_health(
    nodes: Sequence[NodeView],
    leases: Sequence[LeaseView],
    now: float,
    *,
    suspect_s: float = SUSPECT_S,
    lost_s: float = LOST_S,
) -> HealthPlan:
    if not 0 < suspect_s < lost_s:
        raise ValueError(
            f"node health: suspect after {suspect_s:g}s must come before lost after {lost_s:g}s"
        )
    health: list[SetHealth] = []
    lose: list[LoseLease] = []
    delete: list[tuple[str, str]] = []
    for node in nodes:
        if node.heartbeat is None:
            continue  # never reported: nothing placed there either
        silent = now - node.heartbeat
        if silent >= lost_s:
            message = f"node lost: no heartbeat for {silent:.0f}s (lost after {lost_s:g}s)"
            if node.health != "Lost":
                health.append(SetHealth(node.name, "Lost", message))
            for lease in leases:
                if lease.node == node.name and lease.phase in LIVE:
                    lose.append(LoseLease(lease, message, lease.gib_hours(now)))
                    delete.append((lease.pod_namespace, lease.pod_name))
        elif silent >= suspect_s:
            if node.health != "Suspect":
                health.append(
                    SetHealth(node.name, "Suspect", f"node suspect: no heartbeat for {silent:.0f}s")
                )
        elif node.health in ("Suspect", "Lost"):
            health.append(SetHealth(node.name, "Healthy", "heartbeat resumed"))
    return HealthPlan(tuple(health), tuple(lose), tuple(dict.fromkeys(delete)))
