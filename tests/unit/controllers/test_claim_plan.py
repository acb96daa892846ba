"""The claim allocator's pure decision (`controllers.dra.plan`): the planner's node among those
allowed, the claim status kube-scheduler and the kubelet read, and the lease it is charged."""

from __future__ import annotations

import uuid

import pytest

from gpupool.adapters.kubernetes.claim_writes import allocation_status
from gpupool.controllers.dra.plan import NoRoom, claim_lease, consumed_memory, pick
from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu, Node
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB, MiB
from gpupool.placement import Planner
from gpupool.placement.default_workload import default_workload
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.state.admitted import Admitted
from gpupool.state.claim_writes import ClaimAllocationWrite, ClaimTarget, share_id
from gpupool.state.pods import PodView

TARGET = ClaimTarget(
    "ns", "p-gpu", "cuid", "gpu", "gpu.gpupool.io",
    ({"opaque": {"driver": "gpu.gpupool.io", "parameters": {"computeMode": "mps"}}},),
)  # fmt: skip


def snapshot() -> ClusterSnapshot:
    def node(name: str) -> Node:
        gpus = tuple(Gpu(index=i, model="A100-80GB", uuid=f"{name}-{i}") for i in range(2))
        return Node(name=name, cpu_milli=64000, memory_mib=256 * 1024, gpus=gpus)

    return ClusterSnapshot.from_nodes([node("n1"), node("n2"), node("n3")])


def request() -> Request:
    return Request(name="p", gpu_count=1, gpu_memory_bytes=12 * GiB, compute_pct=30)


def test_pick_takes_the_planners_best_among_the_allowed_nodes_only() -> None:
    planner = Planner("gpupool", default_workload())
    snap = snapshot()
    for allowed in ({"n2"}, {"n3"}, {"n1", "n3"}):
        assert pick(planner, snap, request(), allowed).node in allowed


def test_pick_says_why_when_no_allowed_node_fits() -> None:
    planner = Planner("gpupool", default_workload())
    with pytest.raises(NoRoom, match="do not publish gpupool's DRA devices"):
        pick(planner, snapshot(), request(), set())
    huge = Request(name="p", gpu_count=4, gpu_memory_bytes=12 * GiB)
    with pytest.raises(NoRoom, match="no node has room"):
        pick(planner, snapshot(), huge, {"n1"})


def test_the_allocation_names_the_card_its_share_and_what_it_consumes() -> None:
    piece = Slice(gpu_index=1, uuid="n2-1", model="A100-80GB", offset_bytes=0,
                  size_bytes=12 * GiB, compute_milli=300)  # fmt: skip
    status = allocation_status(ClaimAllocationWrite(TARGET, "n2", (piece,), "2026-12-03T16:00:00Z"))
    [result] = status["allocation"]["devices"]["results"]
    assert result == {
        "request": "gpu", "driver": "gpu.gpupool.io", "pool": "n2", "device": "gpu-1",
        "shareID": share_id("cuid", "gpu-1"),
        "consumedCapacity": {"memory": str(12 * GiB), "compute": "30", "shares": "1"},
    }  # fmt: skip
    assert str(uuid.UUID(result["shareID"])) == result["shareID"]  # RFC 4122, lowercase
    assert share_id("cuid", "gpu-1") != share_id("other", "gpu-1")
    [config] = status["allocation"]["devices"]["config"]
    assert config["source"] == "FromClaim" and config["requests"] == ["gpu"]
    [term] = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    # stamped, so kube-scheduler's PreBind has nothing to add to an immutable allocation
    assert status["allocation"]["allocationTimestamp"] == "2026-12-03T16:00:00Z"


def test_a_whole_card_consumes_its_bytes_down_to_the_drivers_step() -> None:
    piece = Slice(gpu_index=0, uuid="u", model="A100-80GB", offset_bytes=0,
                  size_bytes=72 * GiB + 12345, compute_milli=1000)  # fmt: skip
    assert consumed_memory(piece) == 72 * GiB
    assert consumed_memory(piece) % MiB == 0


def test_the_lease_is_charged_as_admitted_and_records_mps() -> None:
    piece = Slice(gpu_index=0, uuid="u", model="A100-80GB", offset_bytes=0,
                  size_bytes=12 * GiB, compute_milli=300)  # fmt: skip
    pod = PodView(
        namespace="ns", name="p", uid="uid-p", tenant="alpha", priority=2, submitted_at=0.0,
        request=Request(name="p", gpu_count=1, gpu_memory_bytes=12 * GiB, compute_pct=30,
                        priority=2),
        problem=None, gated=True, gate_index=0, phase="Pending", deleting=False, node=None,
        admitted=Admitted(0.0, borrowed=4 * GiB, preemptible=True, resource="gpu-memory",
                          amount=12 * GiB),
        queue_note=None,
    )  # fmt: skip
    lease = claim_lease(pod, "n1", [piece], {"u": 72 * GiB}, "mps")
    assert (lease.name, lease.node, lease.amount, lease.resource) == (
        "uid-p", "n1", 12 * GiB, "gpu-memory")  # fmt: skip
    assert (lease.borrowed, lease.preemptible, lease.priority) == (4 * GiB, True, 2)
    assert (lease.compute_mode, lease.mps_percentage) == ("mps", 30)
