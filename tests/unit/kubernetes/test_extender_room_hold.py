"""Room held by reclaim: the node reclaim freed for a waiting pod P (the victim's GpuLease
`status.reclaim` with `room`, `for`, `forUid`, `holdUntil`) is refused to every other pod by the
extender's filter while the hold stands; P itself is not refused; the hold ends when P holds a
lease, when `holdUntil` passes, or when the controller removes `holdUntil`."""

from __future__ import annotations

from typing import Any

from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.filter import filter_nodes
from gpupool.adapters.extender_http.room_hold import held_against, held_reason, hold_stands
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs, ExtenderFilterResult
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json, read_room_hold
from gpupool.adapters.kubernetes.node import read_node
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef, RoomHold

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
UNTIL = "2027-01-15T08:05:00Z"  # T0 + 300 s
HOLD = RoomHold(node="x", pod="a/p", uid="uid-p", until=T0 + 300)


def _lease(ns: str, uid: str, node: str, gib: int, **status: Any) -> dict[str, Any]:
    record = LeaseRecord(
        name=uid,
        namespace=ns,
        tenant=ns,
        pod=PodRef(ns, uid.removeprefix("uid-"), uid),
        node=node,
        slices=(Slice(0, f"GPU-{node}-0", "A100-80GB", 0, gib * GiB, 0),),
        amount=gib * GiB,
    )
    obj = lease_to_json(record)
    obj["status"] = status
    return obj


def _victim(phase: str = "Reclaimed", **reclaim: Any) -> dict[str, Any]:
    """b3's lease on x: evicted for room for a/p."""
    record = {"at": "2027-01-15T08:00:00Z", "reason": "RoomReclaim", "message": "evicted"}
    record |= {"room": "x", "for": "a/p", "forUid": "uid-p", "holdUntil": UNTIL} | reclaim
    return _lease("b", "uid-b3", "x", 48, phase=phase, reclaim=record)


def _pod(ns: str, name: str, gib: int) -> dict[str, Any]:
    return pod_json(name, namespace=ns, uid=f"uid-{name}", gpu_memory=f"{gib}Gi", vgpu=1)


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 10

    def __call__(self) -> float:
        return self.now


def _setup(*leases: dict[str, Any]) -> tuple[ClusterCache, Extender, Clock]:
    cache = ClusterCache()
    cache.rebuild(
        [read_node(n) for n in [node_json("x", cards=1), node_json("y", cards=1)]],
        [],
        [lease_from_json(x) for x in leases],
    )
    clock = Clock()
    return cache, Extender(cache, policy="binpack", clock=clock), clock


def _filter(ext: Extender, pod: dict[str, Any]) -> ExtenderFilterResult:
    return ext.filter(ExtenderArgs.from_json({"Pod": pod, "NodeNames": ["x", "y"]}))


def _fitting(ext: Extender, pod: dict[str, Any]) -> ExtenderFilterResult:
    """Every node that takes the pod (`filter_nodes`; /filter itself answers the planner's pick
    alone among them, filter_pick.py)."""
    args = ExtenderArgs.from_json({"Pod": pod, "NodeNames": ["x", "y"]})
    return filter_nodes(ext.plans, args.pod, args.node_names, ext.clock())


# ---- reading the hold --------------------------------------------------------------------------
def test_the_hold_is_read_from_a_room_reclaim_record_with_hold_until() -> None:
    assert lease_from_json(_victim()).room_hold == HOLD
    record = {"at": "2027-01-15T08:00:00Z", "reason": "RoomReclaim", "room": "x", "for": "a/p"}
    assert read_room_hold(record | {"forUid": "uid-p"}) is None  # no holdUntil: ended
    assert read_room_hold(record | {"forUid": "uid-p", "holdUntil": "soon"}) is None
    assert read_room_hold(record | {"holdUntil": UNTIL}) is None  # whose uid?
    quota = record | {"reason": "QuotaReclaim", "forUid": "uid-p", "holdUntil": UNTIL}
    assert read_room_hold(quota) is None
    assert read_room_hold(None) is None and read_room_hold("x") is None
    assert HOLD.lease_key == "a/uid-p"  # P's lease, once bound: named after its uid


# ---- the pure rule ----------------------------------------------------------------------------
def test_the_rule_refuses_the_held_node_to_others_only_while_it_stands() -> None:
    nobody = lambda key: False  # noqa: E731
    assert held_against([HOLD], "uid-q", T0, nobody) == {"x": held_reason(HOLD)}
    assert held_reason(HOLD) == "node x: room is being made for pod a/p (reclaim)"
    assert held_against([HOLD], "uid-p", T0, nobody) == {}  # P itself
    assert held_against([HOLD], "uid-q", T0 + 300, nobody) == {}  # timed out
    assert held_against([HOLD], "uid-q", T0, lambda key: key == "a/uid-p") == {}  # P bound
    assert hold_stands(HOLD, T0 + 299.9, nobody) and not hold_stands(HOLD, T0 + 300, nobody)


# ---- the extender's filter ----------------------------------------------------------------------
def test_the_held_node_is_refused_to_another_pod_with_the_reason() -> None:
    _, ext, _ = _setup(_victim(), _lease("b", "uid-b4", "y", 72, phase="Active"))
    q = _filter(ext, _pod("c", "q", 40))
    assert q.node_names is None
    assert q.failed_and_unresolvable == {"x": "node x: room is being made for pod a/p (reclaim)"}
    assert "x" not in q.failed_nodes and "y" in q.failed_nodes  # y: full, its own reason
    assert ext.refused_that_fit() == []  # held x is no room to requeue q for


def test_the_pod_room_was_made_for_is_allowed_on_the_held_node() -> None:
    _, ext, _ = _setup(_victim())
    assert _fitting(ext, _pod("a", "p", 48)).node_names == ("x", "y")
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("y",)  # y is free: only x is held


def test_the_hold_ends_when_the_pod_is_bound() -> None:
    cache, ext, _ = _setup(_victim(), _lease("b", "uid-b4", "y", 40, phase="Active"))
    assert _fitting(ext, _pod("c", "q", 8)).node_names == ("y",)
    cache.set_lease(lease_from_json(_lease("a", "uid-p", "x", 48)))  # P's lease: bound on x
    assert _fitting(ext, _pod("c", "q", 8)).node_names == ("x", "y")


def test_the_hold_ends_when_the_controller_removes_it_and_when_the_lease_goes() -> None:
    cache, ext, _ = _setup(_victim())
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("y",)
    ended = _victim()
    del ended["status"]["reclaim"]["holdUntil"]  # P gone: the controller ended the hold
    cache.set_lease(lease_from_json(ended))
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("x", "y")
    cache.set_lease(lease_from_json(_victim()))
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("y",)
    cache.delete_lease("b/uid-b3")  # garbage-collected
    assert not cache.room_holds
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("x", "y")


def test_the_hold_ends_after_hold_until() -> None:
    _, ext, clock = _setup(_victim())
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("y",)
    clock.now = T0 + 300
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("x", "y")


def test_a_relist_finds_the_same_hold() -> None:
    cache, ext, _ = _setup()
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("x", "y")
    cache.rebuild(
        [read_node(n) for n in [node_json("x", cards=1), node_json("y", cards=1)]],
        [],
        [lease_from_json(_victim())],
    )
    assert cache.room_holds == {"b/uid-b3": HOLD}
    assert _fitting(ext, _pod("c", "q", 40)).node_names == ("y",)
