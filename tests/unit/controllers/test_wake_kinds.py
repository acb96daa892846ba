"""Which kind the loops hear a watched change as (`controllers.wakes`): a Node whose readiness or
taints alone moved is a `node-state` change (admission does not wake on it), one whose labels'
cards moved stays `nodes`; a GpuQuota whose status alone moved (the controller's own write) is
`gpuquota-status`, a spec change stays `gpuquotas`; made and deleted objects keep their kind."""

from __future__ import annotations

import copy
from typing import Any

from gpupool.controllers.wakes import NODE_STATE, POOL_STATUS, QUOTA_STATUS, wake_kind
from gpupool.state.objects import Change


def node(version: str, *, ready: str = "True", model: str = "A100-80GB") -> dict[str, Any]:
    """Each version a distinct resourceVersion, as the API server gives (the decoder remembers)."""
    return {
        "metadata": {"name": "n1", "uid": "u-n1", "resourceVersion": version,
                     "labels": {"gpupool.io/gpu-model": model, "gpupool.io/gpu-count": "2"}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }  # fmt: skip


def test_a_node_whose_readiness_alone_moved_is_a_node_state_change() -> None:
    flapped = node("2", ready="Unknown")
    flapped["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]
    assert wake_kind(Change("nodes", "n1", node("1"), flapped)) == NODE_STATE


def test_a_node_whose_cards_moved_or_that_came_or_went_stays_a_nodes_change() -> None:
    assert wake_kind(Change("nodes", "n1", node("1"), node("3", model="H100-80GB"))) == "nodes"
    assert wake_kind(Change("nodes", "n1", None, node("1"))) == "nodes"
    assert wake_kind(Change("nodes", "n1", node("1"), None)) == "nodes"


def quota(version: str, generation: int, nominal: str = "24Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": "alpha", "resourceVersion": version, "generation": generation},
        "spec": {"nominal": nominal},
        "status": {"used": "0"},
    }


def test_a_quota_whose_status_alone_moved_is_a_status_change() -> None:
    written = copy.deepcopy(quota("2", 1))
    written["status"]["used"] = "12Gi"
    assert wake_kind(Change("gpuquotas", "alpha", quota("1", 1), written)) == QUOTA_STATUS
    respecced = quota("3", 2, nominal="48Gi")
    assert wake_kind(Change("gpuquotas", "alpha", quota("1", 1), respecced)) == "gpuquotas"


def test_a_pool_whose_status_alone_moved_is_a_status_change() -> None:
    # the metrics+pools loop writes GpuPool status: its own write must not wake it again
    pool = {
        "metadata": {"name": "a100", "resourceVersion": "1", "generation": 1},
        "spec": {"nodeSelector": {"pool": "a100"}},
        "status": {"fragmentation": "0.0%"},
    }
    written = copy.deepcopy(pool)
    written["metadata"]["resourceVersion"] = "2"
    written["status"]["fragmentation"] = "12.5%"
    assert wake_kind(Change("gpupools", "a100", pool, written)) == POOL_STATUS
    respecced = copy.deepcopy(written)
    respecced["metadata"] |= {"resourceVersion": "3", "generation": 2}
    respecced["spec"]["defragThresholdPercent"] = 20
    assert wake_kind(Change("gpupools", "a100", written, respecced)) == "gpupools"


def test_other_kinds_keep_their_kind() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Pending"}}
    moved = {**pod, "status": {"phase": "Running"}}
    assert wake_kind(Change("pods", "ns/p", pod, moved)) == "pods"
