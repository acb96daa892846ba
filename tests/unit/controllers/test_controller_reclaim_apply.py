"""Reclaim's writes (`apply_reclaim`) against a fake ClusterApi: a pod the Eviction API took gets
its GpuLease marked (`status.reclaim`, the lease named after the pod's uid), so the lease ends as
Reclaimed once the pod is gone; a refused eviction marks nothing; a mark that cannot be written
is logged and the round goes on (the lease is then released as for any pod that goes)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
from test_controller_reclaim_plan import NOW, beta_pods, lease, pod, quotas, reclaim_round

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.lease import lease_from_json, phase_name
from gpupool.adapters.kubernetes.lease_writes import ROOM_HOLD_ENDED, eviction_mark
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.leases.plan import plan_leases
from gpupool.controllers.notices.plan import EvictPod
from gpupool.controllers.reclaim.plan import ReclaimRound
from gpupool.controllers.reclaim.reconcile import apply_reclaim
from gpupool.ports import ClusterApi, Json
from gpupool.state.lease_writes import EvictionMark
from gpupool.state.listed import ObjectReference
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView


class FakeApi:
    """The ClusterApi writes apply_reclaim makes, recorded; evictions and lease patches answer
    as told."""

    def __init__(
        self, *, refuse: str | None = None, lease_patch: bool | BaseException = True
    ) -> None:
        self.refuse = refuse
        self.lease_patch = lease_patch
        self.calls: list[tuple[Any, ...]] = []

    async def evict_pod(self, namespace: str, name: str) -> str | None:
        self.calls.append(("evict", namespace, name))
        return self.refuse

    async def _lease_status(self, namespace: str, name: str, status: Json) -> bool:
        self.calls.append(("lease-status", namespace, name, status))
        if isinstance(self.lease_patch, BaseException):
            raise self.lease_patch
        return self.lease_patch

    # the lease writes, recorded as the status patch the real adapter sends for each
    async def mark_lease_evicted(self, namespace: str, name: str, mark: EvictionMark) -> bool:
        return await self._lease_status(namespace, name, {"reclaim": eviction_mark(mark)})

    async def end_room_hold(self, namespace: str, name: str) -> bool:
        return await self._lease_status(namespace, name, ROOM_HOLD_ENDED)

    async def annotate_pod(self, pod: PodView, annotations: Any, *, same_uid: bool) -> bool:
        self.calls.append(("patch-pod", pod.namespace, pod.name))
        return True

    async def event(self, about: ObjectReference, reason: str, message: str, **kw: Any) -> None:
        self.calls.append(("event", about.name, reason))

    def lease_writes(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == "lease-status"]


def _due_round() -> tuple[ReclaimRound, dict[str, ObjectReference]]:
    """b4 (borrowed) was noticed for alpha's a1 and its grace period is over: evicted now."""
    notice = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1")
    beta = beta_pods(b4={"notice": notice})
    plan = reclaim_round(
        [*beta, pod("a1", "alpha", submitted=50)], [lease(p) for p in beta], quotas(), NOW + 3
    )
    assert [e.pod.name for e in plan.evictions] == ["b4"]
    refs = {p.key: ObjectReference("Pod", "v1", p.name, p.namespace, p.uid) for p in beta}
    return plan, refs


def _apply(api: FakeApi, plan: ReclaimRound, raw: dict[str, ObjectReference]) -> None:
    asyncio.run(apply_reclaim(cast(ClusterApi, api), plan, raw, NOW + 3))


def test_an_evicted_pods_lease_is_marked_after_the_eviction() -> None:
    plan, raw = _due_round()
    api = FakeApi()
    _apply(api, plan, raw)
    kinds = [c[0] for c in api.calls]
    assert kinds.index("evict") < kinds.index("lease-status")  # marked once evicted, not before
    [(_, namespace, name, status)] = api.lease_writes()
    assert (namespace, name) == ("ns", "uid-b4")  # the lease is named after the pod's uid
    record = status["reclaim"]
    assert record["at"] == format_time(NOW + 3) and record["reason"] == "QuotaReclaim"
    assert "give tenant alpha its quota back" in record["message"]
    assert ("event", "b4", "Reclaimed") in api.calls
    # the mark is what leases.plan reads: the lease ends Reclaimed once the pod is gone
    obj = {"metadata": {"name": "uid-b4", "namespace": "ns"},
           "spec": {"podRef": {"namespace": "ns", "name": "b4", "uid": "uid-b4"}, "tenant": "beta",
                    "node": "n1", "borrowed": 12 * 2**30,
                    "devices": [{"index": 0, "model": "A100-80GB", "sizeBytes": 2**30}]},
           "status": {"phase": "Active", "start": format_time(NOW - 3600), **status}}  # fmt: skip
    gone = plan_leases([lease_from_json(obj)], {}, NOW + 3, known_gone=frozenset({"uid-b4"}))
    assert [(phase_name(m.phase), m.reason) for m in gone.moves] == [("Reclaimed", "Evicted")]


def test_a_pod_evicted_for_room_is_marked_so() -> None:
    plan, raw = _due_round()
    [eviction] = plan.evictions
    room = ReclaimNotice(NOW, NOW + 3, "alpha", "ns/a1", room="n1")
    plan = ReclaimRound((), (EvictPod(eviction.pod, room, "evicted to make room"),), (), ())
    api = FakeApi()
    _apply(api, plan, raw)
    [(_, _, _, status)] = api.lease_writes()
    assert status["reclaim"]["reason"] == "RoomReclaim"
    assert status["reclaim"]["message"] == "evicted to make room"


def test_a_refused_eviction_marks_no_lease() -> None:
    plan, raw = _due_round()
    api = FakeApi(refuse="Cannot evict pod as it would violate the pod's disruption budget.")
    _apply(api, plan, raw)
    assert ("evict", "ns", "b4") in api.calls
    assert api.lease_writes() == []
    assert ("event", "b4", "EvictionBlocked") in api.calls
    assert ("event", "b4", "Reclaimed") not in api.calls


@pytest.mark.parametrize("answer", [False, RuntimeError("500 Internal Server Error")])
def test_a_mark_that_cannot_be_written_is_logged_and_the_round_goes_on(
    answer: bool | BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    plan, raw = _due_round()
    api = FakeApi(lease_patch=answer)
    with caplog.at_level(logging.WARNING, logger="gpupool.controller.reclaim"):
        _apply(api, plan, raw)
    assert len(api.lease_writes()) == 1
    assert ("event", "b4", "Reclaimed") in api.calls
    assert "will end as Released, not Reclaimed" in caplog.text


def test_a_replica_that_is_no_longer_leader_stops_at_the_mark() -> None:
    plan, raw = _due_round()
    api = FakeApi(lease_patch=NotLeader("status of GpuLease refused"))
    with pytest.raises(NotLeader):
        _apply(api, plan, raw)
    assert ("event", "b4", "Reclaimed") not in api.calls
