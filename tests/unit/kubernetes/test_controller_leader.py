"""The controller under leader election: `run_loops` with a LeaderElector against the in-memory
coordination Lease of test_leader (a clock the test moves), and ClusterApi's writes guarded by
the elector. A standby reconciles nothing, a replica starts as soon as it is elected, and a
replica whose lease is lost stops writing: at its next write, and in every round after."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from support.lease_api import Clock, FakeLeaseApi
from support.waiting import wait_until_async
from test_leader import DEADLINE_S, LEASE_S, _elector

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.adapters.kubernetes.decoded import reference_of
from gpupool.adapters.kubernetes.leader import LeaderElector, NotLeader
from gpupool.controllers.manager import Loop, run_loops, whole
from gpupool.state.status_writes import GpuNodeHealthWrite, QuotaStatusWrite

BOUND = 5.0  # seconds: a hang guard on each wait; every step is in-process


def _until(check: Callable[[], bool], what: str) -> Awaitable[bool]:
    return wait_until_async(check, BOUND, what)


POD = {"metadata": {"name": "p", "namespace": "t", "uid": "u"}}


class WriteLog:
    """The lightkube client as ClusterApi's writes see it: every call recorded, none refused."""

    def __init__(self, who: str, writes: list[str]) -> None:
        self.who = who
        self.writes = writes

    async def patch(self, kind: Any, name: str, *args: Any, **kw: Any) -> None:
        self.writes.append(f"{self.who} patch {name}")

    async def delete(self, kind: Any, name: str, *args: Any, **kw: Any) -> None:
        self.writes.append(f"{self.who} delete {name}")

    async def create(self, obj: Any, *args: Any, **kw: Any) -> None:
        self.writes.append(f"{self.who} create")


def _api(who: str, writes: list[str], may_write: Callable[[], bool] | None) -> KubeClusterApi:
    return KubeClusterApi(cast(AsyncClient, WriteLog(who, writes)), may_write=may_write)


WRITES: dict[str, Callable[[KubeClusterApi], Awaitable[object]]] = {
    "patch_pod": lambda api: api.patch_pod("t", "p", {}, json_patch=False),
    "delete_pod": lambda api: api.delete_pod("t", "p"),
    "evict_pod": lambda api: api.evict_pod("t", "p"),
    "event": lambda api: api.event(
        reference_of("Pod", POD), "Admitted", "m", now_rfc3339="2026-01-01T00:00:00Z"
    ),
    "patch_quota_status": lambda api: api.patch_quota_status(
        "q", QuotaStatusWrite("0", 0, "0", 0, "0", 0, 0, 0, (), None)
    ),
    "patch_lease_status": lambda api: api.patch_lease_status("t", "u", {}),
    "delete_lease": lambda api: api.delete_lease("t", "u"),
    "patch_gpu_node_status": lambda api: api.patch_gpu_node_status(
        "n", GpuNodeHealthWrite("Healthy", ())
    ),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_cluster_write_asks_first_and_refused_writes_nothing(write: str) -> None:
    writes: list[str] = []
    leader = [True]
    api = _api("a", writes, lambda: leader[0])
    asyncio.run(WRITES[write](api))
    assert len(writes) == 1  # it does write while leading
    leader[0] = False
    with pytest.raises(NotLeader):
        asyncio.run(WRITES[write](api))
    assert len(writes) == 1
    unguarded = _api("b", writes, None)  # no election: always writes
    asyncio.run(WRITES[write](unguarded))
    assert len(writes) == 2


class Replica:
    """One controller replica: its elector, a ClusterApi guarded by it, and `run_loops` with one
    reconciler that reads (yields) and then writes twice, as a round does.

    What a round did is observable without waiting a while: `decided` counts the rounds that
    asked whether to reconcile (a standby's round ends at that answer: nothing more can happen in
    it), `rounds` the reconciles begun, `finished` those that returned or raised."""

    def __init__(self, lease_api: FakeLeaseApi, clock: Clock, who: str, writes: list[str]) -> None:
        self.wake = asyncio.Event()
        self.elector: LeaderElector = _elector(lease_api, clock, who, on_elected=self.wake.set)
        self.api = _api(who, writes, self.elector.is_leader)
        self.decided = 0
        self.rounds = 0
        self.finished = 0
        self.between_writes: Callable[[], None] = lambda: None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def leading(self) -> bool:
        self.decided += 1
        return self.elector.is_leader()

    async def reconcile(self) -> None:
        self.rounds += 1
        try:
            await asyncio.sleep(0)  # the reads
            await self.api.patch_pod("t", "first", {}, json_patch=False)
            self.between_writes()
            await self.api.patch_pod("t", "second", {}, json_patch=False)
        finally:
            self.finished += 1

    def start(self) -> None:
        # A resync far away: only `wake` (the election) can start a round within the test.
        loops = [Loop("admission", whole(self.reconcile))]
        self.task = asyncio.ensure_future(
            run_loops(
                loops,
                self.stop,
                resync_s=60.0,
                debounce_s=0.0,
                leading=self.leading,
                wake=self.wake,
            )
        )

    async def close(self) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, timeout=5)


def test_a_standby_reconciles_nothing_and_starts_as_soon_as_it_is_elected() -> None:
    async def main() -> None:
        lease_api, clock, writes = FakeLeaseApi(), Clock(), []
        other = _elector(lease_api, clock, "other")
        await other._try()  # another replica leads
        a = Replica(lease_api, clock, "a", writes)
        await a.elector._try()  # a follows
        a.start()
        await _until(lambda: a.decided == 1, "a's first round")
        assert a.rounds == 0 and writes == []  # standing by: no reads, no writes
        await other.release()  # the leader stops (SIGTERM): a takes over on its next round
        await a.elector._try()
        assert a.elector.is_leader()
        await _until(lambda: a.finished == 1, "a's first round as leader")
        assert writes == ["a patch first", "a patch second"]
        await a.close()

    asyncio.run(main())


def test_a_replica_whose_lease_is_lost_stops_writing_mid_round_and_the_new_leader_takes_over() -> (
    None
):
    async def main() -> None:
        lease_api, clock, writes = FakeLeaseApi(), Clock(), []
        a = Replica(lease_api, clock, "a", writes)
        b = Replica(lease_api, clock, "b", writes)
        await a.elector._try()
        await b.elector._try()
        a.start()
        b.start()
        await _until(lambda: a.finished == 1 and b.decided == 1, "a's and b's first rounds")
        assert writes == ["a patch first", "a patch second"] and b.rounds == 0

        # a's next round is woken by a watched change; between its two writes a's term runs out
        # (no renewal got through within its renew deadline).
        def cut_off() -> None:
            a.between_writes = lambda: None
            clock.t += DEADLINE_S  # the first write is in; a's term ends before the second
            assert not a.elector.is_leader()

        a.between_writes = cut_off
        a.wake.set()
        await _until(lambda: a.finished == 2, "a's second round")
        assert writes[2:] == ["a patch first"]  # the second write was refused: NotLeader
        # a stays silent; once its lease has run out, b takes it over.
        clock.t += LEASE_S + 1
        await b.elector._try()
        assert b.elector.is_leader() and lease_api.holder() == "b"
        await _until(lambda: b.finished == 1, "b's first round as leader")
        assert writes[3:] == ["b patch first", "b patch second"]
        # a keeps standing by: woken, it neither reads nor writes while b leads.
        decided = a.decided
        a.wake.set()
        await _until(lambda: a.decided == decided + 1, "a's round after the wake")
        assert a.rounds == 2 and writes[5:] == []
        await a.elector._try()  # a hears from the API server again: it follows b
        assert not a.elector.is_leader()
        await a.close()
        await b.close()

    asyncio.run(main())
