"""The room hold on the controller's side: a victim evicted for room gets the hold in its
GpuLease's `status.reclaim` (`room`, `for`, `forUid`, `holdUntil` = eviction + ROOM_HOLD_S),
which the extender reads; each round ends the holds whose pod is gone, placed or finished, and a
standing hold of a pod that still waits keeps it from claiming room again."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from test_controller_reclaim_apply import FakeApi
from test_controller_room_reclaim_plan import (
    NOW,
    full_cluster,
    names,
    pod,
    quotas,
    round_of,
    three_a_node,
    waiting,
)

from gpupool.adapters.kubernetes.lease import read_room_hold
from gpupool.adapters.kubernetes.lease_writes import eviction_mark
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.reclaim.plan import ROOM_HOLD_S, EndHold, ReclaimRound
from gpupool.controllers.reclaim.reconcile import apply_reclaim, reclaim_record
from gpupool.ports import ClusterApi
from gpupool.state.lease import RoomHold
from gpupool.state.notice import ReclaimNotice

HOLD = RoomHold(node="n2", pod="ns/a1", uid="uid-a1", until=NOW + 100)


def test_a_victim_evicted_for_room_carries_the_hold_for_the_pod() -> None:
    given = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n2")
    pods = [
        *[p for p in full_cluster() if p.name != "b4"],
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True, notice=given),
        waiting(),
    ]
    [eviction] = round_of(pods, now=NOW + 4).evictions
    assert eviction.claimant_uid == "uid-a1" and eviction.hold_until == NOW + 4 + ROOM_HOLD_S
    record = eviction_mark(reclaim_record(eviction, NOW + 4))
    assert record["room"] == "n2" and record["for"] == "ns/a1" and record["forUid"] == "uid-a1"
    assert record["holdUntil"] == format_time(NOW + 4 + ROOM_HOLD_S)
    assert read_room_hold(record) == RoomHold("n2", "ns/a1", "uid-a1", NOW + 4 + ROOM_HOLD_S)


def test_a_quota_eviction_carries_no_hold() -> None:
    given = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    pods = [
        *[p for p in full_cluster() if p.name != "b4"],
        pod("b4", "beta", node="n2", admitted_at=4, borrowed=True, notice=given),
        pod("a1", "alpha", 200, admitted_at=50),
    ]
    for eviction in round_of(pods, now=NOW + 4).evictions:
        assert eviction.hold_until is None
        record = eviction_mark(reclaim_record(eviction, NOW + 4))
        assert "holdUntil" not in record and read_room_hold(record) is None


def _gone_b4() -> list[Any]:
    """three_a_node with b4 evicted and gone: n2 has b2, b6 (24Gi free)."""
    return [p for p in three_a_node() if p.name != "b4"]


def test_a_standing_hold_keeps_its_pod_from_claiming_room_again() -> None:
    q = quotas(beta_guaranteed_gib=48, beta_nominal_gib=48)
    pods = [*_gone_b4(), waiting("a1", 48)]  # a1 fits nowhere: without the hold, b6 on n2
    assert names(round_of(pods, quotas=q).notices) == ["b6"]
    plan = round_of(pods, quotas=q, holds={"ns/uid-b4": HOLD})
    assert plan.notices == () and plan.ended_holds == ()
    over = RoomHold("n2", "ns/a1", "uid-a1", until=NOW)  # timed out: no longer counts
    assert names(round_of(pods, quotas=q, holds={"ns/uid-b4": over}).notices) == ["b6"]


def test_a_held_node_is_not_cleared_for_another_pod() -> None:
    q = quotas(beta_guaranteed_gib=48, beta_nominal_gib=48)
    pods = [*_gone_b4(), waiting("a1", 24), waiting("a2", 48)]  # a2 fits nowhere
    unheld = round_of(pods, quotas=q).notices  # one victim on n2 is fewer than two on n1
    assert [(i.pod.name, i.notice.room) for i in unheld] == [("b6", "n2")]
    plan = round_of(pods, quotas=q, holds={"ns/uid-b4": HOLD})  # n2 is a1's
    assert sorted((i.pod.name, i.notice.room) for i in plan.notices) == [("b3", "n1"), ("b5", "n1")]


def test_the_hold_is_ended_when_its_pod_is_gone_placed_or_finished() -> None:
    others = _gone_b4()
    cases = {
        "the pod is gone": others,
        "the pod was placed on node n1": [*others, pod("a1", "alpha", 24, node="n1")],
    }
    for why, pods in cases.items():
        plan = round_of(pods, holds={"ns/uid-b4": HOLD})
        assert plan.ended_holds == (
            EndHold("ns/uid-b4", HOLD, f"room on node n2 for pod ns/a1: {why}"),
        )
    recreated = [*others, waiting("a1", 24)]  # same name, other uid: not the pod held for
    other = RoomHold("n2", "ns/a1", "uid-old", until=NOW + 100)
    assert len(round_of(recreated, holds={"ns/uid-b4": other}).ended_holds) == 1
    assert round_of(recreated, holds={"ns/uid-b4": HOLD}).ended_holds == ()  # still waits
    over = RoomHold("n2", "ns/a1", "uid-a1", until=NOW)
    assert round_of(others, holds={"ns/uid-b4": over}).ended_holds == ()  # over: left alone


def test_ending_a_hold_removes_hold_until_from_the_lease() -> None:
    plan = ReclaimRound((), (), (), (), (EndHold("ns/uid-b4", HOLD, "the pod is gone"),))
    api = FakeApi()
    asyncio.run(apply_reclaim(cast(ClusterApi, api), plan, {}, NOW))
    assert api.lease_writes() == [
        ("lease-status", "ns", "uid-b4", {"reclaim": {"holdUntil": None}})
    ]
