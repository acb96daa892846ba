"""A gang in the extender's bind: a member is bound only when all the gang's unplaced members
fit (what-if over the snapshot), the room of the others is then held (ledger and cache) against
every other pod, each member takes its own held room, and a hold past its time is released with
an event. Against the in-memory API server of test_bind_steps."""

from __future__ import annotations

import asyncio
from typing import Any

from support.builders import node_json
from test_bind_steps import MemoryApi, _pod_json

from gpupool.adapters.extender_http.bind import bind_pod
from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.filter import filter_nodes
from gpupool.adapters.extender_http.gang_bind import check_gang, give_back, sweep
from gpupool.adapters.extender_http.gang_hold import GANG_HOLD_S, GangHolds
from gpupool.adapters.extender_http.plans import PlanMemo, Planners
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.reserve import reserve
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.node import read_node
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord

NODES = ("a", "b", "c")


class GangApi(MemoryApi):
    """MemoryApi with the gang's list and the events the extender records."""

    def __init__(self, pods: list[dict[str, Any]], leases: list[LeaseRecord]) -> None:
        super().__init__(pods, leases)
        self.events: list[tuple[str, str, str]] = []

    async def gang_pods(self, namespace: str, gang: str) -> list[ScheduledPod]:
        self._call("gang_pods")
        return [
            ScheduledPod.from_json(p)
            for p in self.pods.values()
            if (p["metadata"].get("labels") or {}).get("gpupool.io/gang") == gang
        ]

    async def pod_event(self, pod: ScheduledPod, reason: str, message: str) -> None:
        self.events.append((pod.name, reason, message))


def member(name: str, gib: int = 40, size: int = 3) -> dict[str, Any]:
    return _pod_json(
        name,
        gib,
        labels={"gpupool.io/gang": "train"},
        annotations={"gpupool.io/gang-size": str(size)},
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def setup(
    pods: list[dict[str, Any]], nodes: tuple[str, ...] = NODES
) -> tuple[GangApi, BindContext, GangHolds, Clock]:
    api = GangApi(pods, [])
    cache = ClusterCache()
    cache.rebuild([read_node(node_json(n, cards=1)) for n in nodes], [], [])
    clock = Clock()
    ctx = BindContext(cache, api, Planners("binpack"), monotonic=clock)
    return api, ctx, GangHolds(), clock


def bind(api: GangApi, ctx: BindContext, gangs: GangHolds, name: str, node: str) -> str:
    pod = ScheduledPod.from_json(api.pods[name])

    async def bound() -> str:
        result = await bind_pod(ctx, gangs, pod, node)
        await ctx.leases.drain()  # the GpuLease follows the Binding
        return result.error

    return asyncio.run(bound())


def offered(api: GangApi, ctx: BindContext, gangs: GangHolds, name: str) -> tuple[str, ...] | None:
    pod = ScheduledPod.from_json(api.pods[name])
    result = filter_nodes(PlanMemo(ctx.cache, ctx.planners), pod, NODES, 0.0, gangs.node_for(pod))
    return result.node_names


def test_the_first_member_binds_only_when_the_whole_gang_fits_and_holds_the_rest() -> None:
    api, ctx, gangs, _ = setup(
        [member("w-0"), member("w-1"), member("w-2"), _pod_json("other", 40)]
    )
    assert bind(api, ctx, gangs, "w-0", "a") == ""
    assert len(gangs) == 2  # w-1 and w-2 hold room on b and c
    held = {x.node for x in ctx.cache.leases.values() if x.pod.name in ("w-1", "w-2")}
    assert held == {"b", "c"}
    for lease in ctx.cache.leases.values():  # counted in their node's ledger too, for bind
        if lease.pod.name in ("w-1", "w-2"):
            assert lease.key in {x.key for x in ctx.ledgers[lease.node].leases()}
    # another pod finds no room: a is full, b and c are held for the gang
    assert offered(api, ctx, gangs, "other") is None
    # each member is offered its held node only, and takes its own room there
    node = offered(api, ctx, gangs, "w-1")
    assert node is not None and len(node) == 1
    assert bind(api, ctx, gangs, "w-1", node[0]) == ""
    assert len(gangs) == 1
    assert api.leases.keys() == {"t/uid-w-0", "t/uid-w-1"}  # held rooms are no GpuLeases


def test_a_member_reserving_gets_a_real_lease_never_its_held_room() -> None:
    # kube-scheduler binds members concurrently: a member may reach reserve with its room held
    api, ctx, gangs, _ = setup([member("w-0", size=2), member("w-1", size=2)])
    assert bind(api, ctx, gangs, "w-0", "a") == ""
    node = gangs.node_for(ScheduledPod.from_json(api.pods["w-1"]))
    assert node is not None
    pod = ScheduledPod.from_json(api.pods["w-1"])
    assert give_back(ctx, gangs, pod)  # the gang step, before reserve (which knows no gangs)
    reserved = asyncio.run(reserve(ctx, pod, node))
    assert not isinstance(reserved, Refusal) and reserved.new
    held = ctx.cache.leases["t/uid-w-1"]  # the member's own lease (created after its Binding)
    assert held.room_hold is None and len(gangs) == 0


def test_a_gang_that_does_not_all_fit_now_is_refused_and_nothing_is_held() -> None:
    api, ctx, gangs, _ = setup(
        [member("w-0"), member("w-1"), member("w-2"), _pod_json("other", 40)]
    )
    assert bind(api, ctx, gangs, "other", "c") == ""
    error = bind(api, ctx, gangs, "w-0", "a")
    assert error.startswith(
        "gang t/train: its 3 unplaced members do not all fit now: with w-0 on a, member w-2 "
        "(1 GPU(s), 40Gi) fits on no node"
    ), error
    assert len(gangs) == 0 and api.leases.keys() == {"t/uid-other"}
    # room appears: the gang is placed
    del api.leases["t/uid-other"]
    ctx.cache.delete_lease("t/uid-other")
    ctx.ledgers["c"].discard("t/uid-other")
    assert bind(api, ctx, gangs, "w-0", "a") == ""


def test_a_gang_that_can_never_fit_says_so() -> None:
    api, ctx, gangs, _ = setup([member("w-0"), member("w-1"), member("w-2")], nodes=("a", "b"))
    pod = ScheduledPod.from_json(api.pods["w-0"])
    refused = asyncio.run(check_gang(ctx, gangs, pod, "a"))
    assert isinstance(refused, Refusal) and refused.why is Why.GANG_NEVER_FITS
    assert "can never be placed" in refused.message and "even with nothing else" in (
        refused.message
    )


def test_a_hold_past_its_time_is_released_with_an_event() -> None:
    api, ctx, gangs, clock = setup([member("w-0", size=2), member("w-1", size=2)])
    assert bind(api, ctx, gangs, "w-0", "a") == ""
    assert len(gangs) == 1 and "t/uid-w-1" in ctx.cache.leases
    assert asyncio.run(sweep(ctx, gangs)) == 0  # not yet
    clock.now += GANG_HOLD_S
    assert asyncio.run(sweep(ctx, gangs)) == 1
    assert len(gangs) == 0 and "t/uid-w-1" not in ctx.cache.leases
    assert all(x.key != "t/uid-w-1" for n in NODES for x in ctx.ledgers[n].leases())
    ((who, reason, message),) = api.events
    assert (who, reason) == ("w-1", "GangHoldExpired") and "was released after 120s" in message
    # the member comes late: it is placed as room allows
    assert bind(api, ctx, gangs, "w-1", "b") == ""


def test_a_cache_rebuild_does_not_drop_a_held_room() -> None:
    api, ctx, gangs, _ = setup([member("w-0", size=2), member("w-1", size=2)])
    assert bind(api, ctx, gangs, "w-0", "a") == ""
    ctx.cache.rebuild(
        [read_node(node_json(n, cards=1)) for n in NODES], [], list(api.leases.values())
    )
    assert "t/uid-w-1" not in ctx.cache.leases
    asyncio.run(sweep(ctx, gangs))
    assert "t/uid-w-1" in ctx.cache.leases
