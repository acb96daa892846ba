"""Node health from the agents' heartbeats, pure: Suspect after `suspect_s` without one, Lost after
`lost_s`; a Lost node's live leases become Lost (metered to now) and their pods are deleted so
their owners (Deployments, Jobs) replace them on healthy nodes. A node that heartbeats again is
Healthy again (Degraded when the agent reports an unhealthy card). A node that never heartbeat is
left alone. The heartbeats are the times the nodes' Leases were last renewed (the reconciler
reads them); losing a lease is the core lifecycle's `lose` (`quota.lease`), which meters it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.quota.lease import Lease
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject

SUSPECT_S = 90.0
LOST_S = 180.0


@dataclass(frozen=True, slots=True)
class SetHealth:
    node: str
    health: str
    message: str


@dataclass(frozen=True, slots=True)
class LoseLease:
    """The lease ends Lost: `to` is the core lease after `lose` (ended now, metered)."""

    lease: LeaseRecord
    to: Lease
    message: str

    @property
    def gib_hours(self) -> float:
        """Metered from its reservation to its end (now)."""
        assert self.to.ended_at is not None  # `lose` ends it
        return self.to.gib_hours(self.to.ended_at)


@dataclass(frozen=True, slots=True)
class HealthPlan:
    health: tuple[SetHealth, ...]
    lose: tuple[LoseLease, ...]
    delete_pods: tuple[tuple[str, str], ...]  # (namespace, name) of pods on lost nodes


def reported_health(node: GpuNodeObject) -> str:
    """The health the agent reports for the node's cards (what a node back from Suspect or Lost
    returns to)."""
    return "Healthy" if all(g.healthy for g in node.gpus) else "Degraded"


def plan_node_health(
    nodes: Sequence[GpuNodeObject],
    heartbeats: Mapping[str, float],
    leases: Sequence[LeaseRecord],
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
        last = heartbeats.get(node.name)
        if last is None:
            continue  # never heartbeat: nothing placed there either
        silent = now - last
        if silent >= lost_s:
            message = f"node lost: no heartbeat for {silent:.0f}s (lost after {lost_s:g}s)"
            if node.health != "Lost":
                health.append(SetHealth(node.name, "Lost", message))
            for lease in leases:
                if lease.node == node.name and lease.holds_capacity:
                    lose.append(LoseLease(lease, lease.accounting(now).lose(now), message))
                    delete.append((lease.pod.namespace, lease.pod.name))
        elif silent >= suspect_s:
            if node.health != "Suspect":
                health.append(
                    SetHealth(node.name, "Suspect", f"node suspect: no heartbeat for {silent:.0f}s")
                )
        elif node.health in ("Suspect", "Lost"):
            health.append(SetHealth(node.name, reported_health(node), "heartbeat resumed"))
    return HealthPlan(tuple(health), tuple(lose), tuple(dict.fromkeys(delete)))


RECHECK_S = 5.0  # a Suspect or Lost node is looked at this often for its heartbeat's return


def next_check(
    nodes: Sequence[GpuNodeObject],
    heartbeats: Mapping[str, float],
    now: float,
    *,
    suspect_s: float = SUSPECT_S,
    lost_s: float = LOST_S,
    recheck_s: float = RECHECK_S,
) -> float | None:
    """When node health next has something to decide that no watched change announces: the
    earliest time a node's last heartbeat grows `suspect_s` or `lost_s` old, and, while a node
    is Suspect or Lost, `recheck_s` from now (a renewal wakes no loop: its return is looked
    for). None: no node has heartbeat yet. A renewal before the deadline only makes that round
    find nothing to do and compute the next."""
    out: float | None = None
    for node in nodes:
        last = heartbeats.get(node.name)
        if last is None:
            continue  # never heartbeat: never judged
        if node.health in ("Suspect", "Lost"):
            at = now + recheck_s
        elif now - last < suspect_s:
            at = last + suspect_s
        elif now - last < lost_s:
            at = last + lost_s
        else:
            continue  # lost already: this round's writes wake the next
        out = at if out is None else min(out, at)
    return out
