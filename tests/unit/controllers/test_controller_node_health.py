"""Node health from heartbeats, pure."""

from __future__ import annotations

import pytest

from gpupool.controllers.node_health.plan import plan_node_health
from gpupool.domain.allocations import Slice
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import GpuNodeObject

T0 = 1_700_000_000.0


def lease(node: str, phase: str = "Active", pod: str = "p") -> LeaseRecord:
    card = Slice(0, "GPU-0", "A100-80GB", 0, 2**30, 0)
    return LeaseRecord(f"l-{pod}", "ns", "alpha", PodRef("ns", pod, f"uid-{pod}"), node, (card,),
                       phase=LeasePhase(phase.lower()), start=T0)  # fmt: skip


def gpu_node(name: str, heartbeat: float | None, health: str) -> GpuNodeObject:
    return GpuNodeObject(name, heartbeat=heartbeat, health=health)


def test_silence_makes_a_node_suspect_then_lost_and_ends_its_leases() -> None:
    leases = [lease("n1", pod="a"), lease("n1", "Released", pod="b"), lease("n2", pod="c")]
    fresh = plan_node_health([gpu_node("n1", T0, "Healthy")], leases, T0 + 30)
    assert fresh.health == () and fresh.lose == ()
    suspect = plan_node_health([gpu_node("n1", T0, "Healthy")], leases, T0 + 95)
    assert [(h.node, h.health) for h in suspect.health] == [("n1", "Suspect")]
    assert "no heartbeat for 95s" in suspect.health[0].message and suspect.lose == ()
    lost = plan_node_health([gpu_node("n1", T0, "Suspect")], leases, T0 + 200)
    assert [h.health for h in lost.health] == ["Lost"]
    assert [x.lease.pod.name for x in lost.lose] == ["a"]  # only live leases on that node
    assert lost.delete_pods == (("ns", "a"),)


def test_thresholds_are_configurable_and_recovery_is_healthy() -> None:
    node = gpu_node("n1", T0, "Healthy")
    assert plan_node_health([node], [], T0 + 11, suspect_s=10, lost_s=20).health[0].health == (
        "Suspect"
    )
    back = plan_node_health([gpu_node("n1", T0, "Lost")], [], T0 + 1)
    assert back.health[0].health == "Healthy"
    with pytest.raises(ValueError, match="must come before"):
        plan_node_health([node], [], T0, suspect_s=30, lost_s=20)
