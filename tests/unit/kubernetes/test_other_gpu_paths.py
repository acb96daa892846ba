"""Another path handing out a node's cards, from the objects to placement: the Node's extended
resources and the ResourceSlices read into the decision, the GpuNode condition the agent writes
(merged into the list others write), the extender's cache refusing the node with its own reason
(unresolvable, the agent's words) and taking it back when the condition clears."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.gpu_paths import (
    advertised,
    condition_differs,
    decide,
    path_condition,
    published_slices,
    reason_of,
)
from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.adapters.wire.conditions import with_condition
from gpupool.domain.requests import Request
from gpupool.placement.filters import UNRESOLVABLE, Reason, explain, feasibility
from gpupool.state.cluster import ClusterCache

GiB = 2**30
CARDS = ["GPU-n1-0", "GPU-n1-1"]


def node(extra: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"cpu": "96", "gpupool.io/vgpu": "20", **(extra or {})}
    return {
        "metadata": {"name": "n1", "uid": "u1", "labels": {}},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def nvidia_slice(uuids: list[str], node_name: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-gpu.nvidia.com-abcde"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}}}
                for i, u in enumerate(uuids)
            ],
        },
    }


def gpunode(conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices = [
        {"index": i, "model": "A100-80GB", "uuid": u, "memoryBytes": 80 * GiB,
         "allocatableBytes": 72 * GiB}
        for i, u in enumerate(CARDS)
    ]  # fmt: skip
    return {
        "metadata": {"name": "n1"},
        "status": {"devices": devices, "conditions": conditions or []},
    }


def test_advertised_takes_extended_resources_and_the_larger_of_capacity_and_allocatable() -> None:
    n = node({"nvidia.com/gpu": "8"})
    n["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    n["status"]["capacity"]["example.com/odd"] = "lots"
    assert advertised(n) == {"gpupool.io/vgpu": 20, "nvidia.com/gpu": 8}


def test_published_slices_reads_the_nodes_slices_and_their_card_uuids() -> None:
    mine = nvidia_slice(CARDS)
    mine["spec"]["devices"][0]["attributes"] = {"gpu.nvidia.com/uuid": {"string": "GPU-q"}}
    [found] = published_slices([mine, nvidia_slice(["GPU-x"], "n2")], "n1")
    assert (found.driver, found.devices) == ("gpu.nvidia.com", 2)
    assert found.uuids == {"GPU-q", "GPU-n1-1"}


def test_nvidias_device_plugin_on_the_node_makes_a_true_condition() -> None:
    finding = decide("n1", node({"nvidia.com/gpu": "8"}), [], CARDS)
    condition = path_condition(finding, "2026-12-03T16:00:00Z")
    assert condition["type"] == "OtherGpuPath" and condition["status"] == "True"
    assert condition["reason"] == reason_of(finding) == "OtherDevicePlugin"
    assert "nvidia.com/gpu (8 on the Node)" in condition["message"]


def test_another_dra_driver_on_the_nodes_cards_makes_a_true_condition() -> None:
    finding = decide("n1", node(), [nvidia_slice(CARDS)], CARDS)
    assert path_condition(finding, "t")["reason"] == "OtherDraDriver"
    both = decide("n1", node({"nvidia.com/gpu": "8"}), [nvidia_slice(CARDS)], CARDS)
    assert reason_of(both) == "OtherDevicePluginAndDraDriver"


def test_a_node_served_by_gpupool_alone_gets_a_false_condition() -> None:
    condition = path_condition(decide("n1", node(), [], CARDS), "t")
    assert (condition["status"], condition["reason"]) == ("False", "OnlyGpupool")


def test_the_condition_goes_beside_the_controllers_and_keeps_its_transition_time() -> None:
    heartbeat = {"type": "Heartbeat", "status": "True", "reason": "Healthy"}
    first = path_condition(decide("n1", node({"nvidia.com/gpu": "8"}), [], CARDS), "t1")
    held = with_condition([heartbeat], first)
    assert [c["type"] for c in held] == ["Heartbeat", "OtherGpuPath"]
    again = path_condition(decide("n1", node({"nvidia.com/gpu": "8"}), [], CARDS), "t2")
    assert not condition_differs(held[1], again)  # nothing to write
    cleared = with_condition(held, path_condition(decide("n1", node(), [], CARDS), "t3"))
    assert cleared[0] == heartbeat
    assert (cleared[1]["status"], cleared[1]["lastTransitionTime"]) == ("False", "t3")
    kept = with_condition(held, {**again, "message": "other words"})
    assert kept[1]["lastTransitionTime"] == "t1"  # the status did not change


REQ = Request(name="p", gpu_count=1, gpu_memory_bytes=8 * GiB)


def cache(conditions: list[dict[str, Any]]) -> ClusterCache:
    c = ClusterCache()
    c.rebuild([read_node(node())], [read_gpu_node(gpunode(conditions))], [])
    return c


def test_the_extender_refuses_a_node_served_by_another_path_with_its_own_reason() -> None:
    finding = decide("n1", node({"nvidia.com/gpu": "8"}), [], CARDS)
    c = cache([path_condition(finding, "t")])
    assert read_gpu_node(gpunode([path_condition(finding, "t")])).other_path == finding.message()
    snap = c.snapshot()
    feas = feasibility(snap, REQ)
    assert Reason(int(feas.reason[0])) is Reason.OTHER_PATH
    assert Reason.OTHER_PATH in UNRESOLVABLE  # preemption cannot make the node gpupool's
    assert "nvidia.com/gpu (8 on the Node)" in explain(snap, REQ, feas, 0)
    assert "nvidia.com/gpu.deploy.device-plugin=false" in explain(snap, REQ, feas, 0)
    assert snap.condition[0] == finding.message()  # the views list it with the nodes skipped


def test_the_node_is_taken_back_when_the_condition_clears() -> None:
    refused = path_condition(decide("n1", node({"nvidia.com/gpu": "8"}), [], CARDS), "t")
    c = cache([refused])
    c.snapshot()
    clear = path_condition(decide("n1", node({"nvidia.com/gpu": "0"}), [], CARDS), "t2")
    c.set_gpunode(read_gpu_node(gpunode([clear])))
    snap = c.snapshot()
    assert Reason(int(feasibility(snap, REQ).reason[0])) is Reason.FITS
    assert snap.condition[0] is None


def test_a_false_condition_refuses_nothing() -> None:
    clear = path_condition(decide("n1", node(), [], CARDS), "t")
    assert read_gpu_node(gpunode([clear])).other_path is None
    assert Reason(int(feasibility(cache([clear]).snapshot(), REQ).reason[0])) is Reason.FITS
