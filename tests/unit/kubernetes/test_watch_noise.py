"""A heartbeat is not a change worth a round: a Node's condition heartbeat alone wakes no loop;
anything else that moved does."""

from __future__ import annotations

import copy
from typing import Any

from gpupool.adapters.kubernetes.noise import only_heartbeat
from gpupool.state.objects import Change

NODE: dict[str, Any] = {
    "metadata": {"name": "n1", "resourceVersion": "1", "labels": {"a": "b"}},
    "spec": {"unschedulable": False},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
        ],
        "allocatable": {"cpu": "8"},
    },
}
GPUNODE: dict[str, Any] = {
    "metadata": {"name": "n1", "resourceVersion": "1"},
    "status": {"health": "Healthy", "gpus": [{"uuid": "u"}]},
}


def _moved(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = "2"
    at = out
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = value
    return out


def test_a_node_heartbeat_alone_is_noise_and_a_condition_change_is_not() -> None:
    beat = _moved(NODE, ("status", "conditions", 0, "lastHeartbeatTime"), "2026-01-01T00:00:10Z")
    assert only_heartbeat(Change("nodes", "n1", NODE, beat))
    not_ready = _moved(beat, ("status", "conditions", 0, "status"), "False")
    assert not only_heartbeat(Change("nodes", "n1", NODE, not_ready))
    cordoned = _moved(NODE, ("spec", "unschedulable"), True)
    assert not only_heartbeat(Change("nodes", "n1", NODE, cordoned))
    relabelled = _moved(NODE, ("metadata", "labels"), {"a": "c"})
    assert not only_heartbeat(Change("nodes", "n1", NODE, relabelled))


def test_a_gpunode_status_change_is_always_a_change() -> None:
    """GpuNodes carry no heartbeat any more (the agents renew a Lease): every write counts."""
    moved = _moved(GPUNODE, ("status", "health"), "Unhealthy")
    assert not only_heartbeat(Change("gpunodes", "n1", GPUNODE, moved))


def test_new_and_deleted_objects_and_other_kinds_are_always_changes() -> None:
    assert not only_heartbeat(Change("gpunodes", "n1", None, GPUNODE))
    assert not only_heartbeat(Change("gpunodes", "n1", GPUNODE, None))
    same_shape = _moved(GPUNODE, ("status", "health"), "later")
    assert not only_heartbeat(Change("gpuleases", "t/a", GPUNODE, same_shape))
