"""Node health from the nodes' heartbeats (their Leases' renewal times), pure."""

from __future__ import annotations

import pytest

from gpupool.controllers.node_health.plan import plan_node_health
from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import GpuNodeObject

T0 = 1_700_000_000.0


def lease(node: str, phase: str = "Active", pod: str = "p") -> LeaseRecord:
    card = Slice(0, "GPU-0", "A100-80GB", 0, 2**30, 0)
    return LeaseRecord(f"l-{pod}", "ns", "alpha", PodRef("ns", pod, f"uid-{pod}"), node, (card,),
                       phase=LeasePhase(phase.lower()), start=T0)  # fmt: skip


def gpu_node(name: str, health: str, *, cards_healthy: tuple[bool, ...] = (True,)) -> GpuNodeObject:
    gpus = tuple(
        Gpu(index=i, model="A100-80GB", uuid=f"GPU-{name}-{i}", healthy=ok)
        for i, ok in enumerate(cards_healthy)
    )
    return GpuNodeObject(name, gpus=gpus, health=health)


def test_silence_makes_a_node_suspect_then_lost_and_ends_its_leases() -> None:
    leases = [lease("n1", pod="a"), lease("n1", "Released", pod="b"), lease("n2", pod="c")]
    beats = {"n1": T0, "n2": T0 + 190}
    fresh = plan_node_health([gpu_node("n1", "Healthy")], beats, leases, T0 + 30)
    assert fresh.health == () and fresh.lose == ()
    suspect = plan_node_health([gpu_node("n1", "Healthy")], beats, leases, T0 + 95)
    assert [(h.node, h.health) for h in suspect.health] == [("n1", "Suspect")]
    assert "no heartbeat for 95s" in suspect.health[0].message and suspect.lose == ()
    nodes = [gpu_node("n1", "Suspect"), gpu_node("n2", "Healthy")]
    lost = plan_node_health(nodes, beats, leases, T0 + 200)
    assert [(h.node, h.health) for h in lost.health] == [("n1", "Lost")]  # n2 beat 10 s ago
    assert [x.lease.pod.name for x in lost.lose] == ["a"]  # only live leases on that node
    assert lost.delete_pods == (("ns", "a"),)


def test_a_node_that_never_heartbeat_is_not_judged() -> None:
    """A GpuNode without a Lease (made by hand, or by an agent that never renewed one)."""
    plan = plan_node_health([gpu_node("n1", "Healthy")], {}, [lease("n1")], T0 + 10_000)
    assert plan.health == () and plan.lose == () and plan.delete_pods == ()


def test_a_node_judged_on_its_own_lease_not_its_neighbours() -> None:
    nodes = [gpu_node("n1", "Healthy"), gpu_node("n2", "Healthy")]
    plan = plan_node_health(nodes, {"n1": T0, "n2": T0 + 100}, [], T0 + 120)
    assert [(h.node, h.health) for h in plan.health] == [("n1", "Suspect")]


def test_thresholds_are_configurable_and_recovery_is_healthy() -> None:
    node = gpu_node("n1", "Healthy")
    beats = {"n1": T0}
    quick = plan_node_health([node], beats, [], T0 + 11, suspect_s=10, lost_s=20)
    assert [h.health for h in quick.health] == ["Suspect"]
    back = plan_node_health([gpu_node("n1", "Lost")], beats, [], T0 + 1)
    assert [(h.health, h.message) for h in back.health] == [("Healthy", "heartbeat resumed")]
    with pytest.raises(ValueError, match="must come before"):
        plan_node_health([node], beats, [], T0, suspect_s=30, lost_s=20)


def test_a_node_back_from_suspect_with_an_unhealthy_card_is_degraded() -> None:
    """The agent no longer rewrites its GpuNode every period, so the controller restores the
    health its cards report."""
    node = gpu_node("n1", "Suspect", cards_healthy=(True, False))
    back = plan_node_health([node], {"n1": T0}, [], T0 + 1)
    assert [h.health for h in back.health] == ["Degraded"]
