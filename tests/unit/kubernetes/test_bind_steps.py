"""Bind's named steps (reserve → write → unreserve) against an in-memory API server that keeps
pods and GpuLeases as the real one does (a lease create of an existing name is a Conflict, a
Binding sets the pod's nodeName and copies its annotations) and fails the call a test names.

The pairing every test checks: whatever a failed step leaves, the cache, the node's ledger and
the API server hold exactly the leases they held before the bind, plus none."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from support.builders import node_json, pod_json

from gpupool.adapters.extender_http.bind import bind_pod
from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.gang_hold import GangHolds
from gpupool.adapters.extender_http.held import hold, release
from gpupool.adapters.extender_http.plans import Planners
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.reserve import Reservation, reserve, unreserve
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs, ExtenderBindingArgs
from gpupool.adapters.kubernetes.errors import Conflict, NotFound
from gpupool.adapters.kubernetes.node import read_node
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.pod_hold import held_by

NODE = "n"
NOW = 100.0  # the ledgers' monotonic clock: still


def _pod_json(name: str, gib: int, **kw: Any) -> dict[str, Any]:
    """Pod t/<name> (uid uid-<name>) asking for one slice of `gib` GiB; 0: no GPU."""
    memory = {"gpu_memory": f"{gib}Gi", "vgpu": 1} if gib else {}
    return pod_json(name, namespace="t", uid=f"uid-{name}", **memory, **kw)


def _lease(
    name: str, gib: int, node: str = NODE, phase: LeasePhase = LeasePhase.RESERVED
) -> LeaseRecord:
    return LeaseRecord(
        name=f"uid-{name}",
        namespace="t",
        tenant="default",
        pod=PodRef("t", name, f"uid-{name}"),
        node=node,
        slices=(Slice(0, f"GPU-{node}-0", "A100-80GB", 0, gib * GiB, 0),),
        amount=gib * GiB,
        phase=phase,
    )


class MemoryApi:
    """The ExtenderApi over dicts. `fail[call]` is raised by that call (once)."""

    def __init__(self, pods: list[dict[str, Any]], leases: list[LeaseRecord]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.leases = {x.key: x for x in leases}
        self.fail: dict[str, Exception] = {}
        self.calls: list[str] = []

    def _call(self, what: str) -> None:
        self.calls.append(what)
        err = self.fail.pop(what, None)
        if err is not None:
            raise err

    async def get_pod(self, namespace: str, name: str) -> ScheduledPod:
        self._call("get_pod")
        if name not in self.pods:
            raise NotFound(404, f'pods "{name}" not found')
        return ScheduledPod.from_json(self.pods[name])

    async def leases_on_node(self, node: str) -> list[LeaseRecord]:
        self._call("leases_on_node")
        return [x for x in self.leases.values() if x.node == node]

    async def held_by_bound_pods(self) -> list[LeaseRecord]:
        """What bound pods' annotations hold, as `state.pod_hold.held_by` reads them."""
        self._call("held_by_bound_pods")
        views = [read_pod(p) for p in self.pods.values() if p["spec"].get("nodeName")]
        return [h for h in map(held_by, views) if h is not None]

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        self._call("get_lease")
        return self.leases.get(f"{namespace}/{name}")

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        self._call("create_lease")
        if lease.key in self.leases:
            raise Conflict(409, f'gpuleases "{lease.name}" already exists')
        self.leases[lease.key] = stored = replace(lease, resource_version="1")
        return stored

    async def delete_lease(self, namespace: str, name: str) -> None:
        self._call("delete_lease")
        self.leases.pop(f"{namespace}/{name}", None)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self._call("annotate_pod")
        self.pods[name]["metadata"].setdefault("annotations", {}).update(annotations)

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self._call("bind_pod")
        pod = self.pods[name]
        if pod["spec"].get("nodeName"):
            raise Conflict(409, f"pod {name} is already assigned to {pod['spec']['nodeName']}")
        pod["spec"]["nodeName"] = node
        pod["metadata"].setdefault("annotations", {}).update(annotations or {})


def _cache(nodes: tuple[str, ...], leases: list[LeaseRecord]) -> ClusterCache:
    cache = ClusterCache()
    cache.rebuild([read_node(node_json(n, cards=1)) for n in nodes], [], leases)
    return cache


def _ctx(api: MemoryApi, nodes: tuple[str, ...] = (NODE,)) -> BindContext:
    """A context whose cache holds what the API server holds (as the informer would)."""
    cache = _cache(nodes, list(api.leases.values()))
    return BindContext(cache, api, Planners("binpack"), monotonic=lambda: NOW)


def _state(ctx: BindContext, node: str = NODE) -> tuple[set[str], set[str]]:
    """The lease keys the cache and the node's ledger hold."""
    return set(ctx.cache.leases), {x.key for x in ctx.ledgers[node].leases()}


def _pod(api: MemoryApi, name: str) -> ScheduledPod:
    return ScheduledPod.from_json(api.pods[name])


# ---- hold / release: the in-memory reservation --------------------------------------------------
def test_a_held_lease_counts_in_the_cache_and_ledger_and_release_undoes_exactly_it() -> None:
    api = MemoryApi([], [_lease("other", 20)])
    ctx = _ctx(api)
    asyncio.run(reserve(ctx, ScheduledPod.from_json(_pod_json("x", 0)), NODE))  # lists the node
    before = _state(ctx)
    planned = _lease("p", 12)
    held = hold(ctx.cache, ctx.ledgers, planned)
    assert planned.key in ctx.cache.leases and planned.key in _state(ctx)[1]
    release(ctx.cache, ctx.ledgers, held, known=True)
    assert _state(ctx) == before
    assert not ctx.ledgers[NODE].stale(10.0, NOW)  # known not made: the ledger stays trusted


def test_release_restores_the_cache_copy_the_held_lease_shadowed() -> None:
    """The pod's lease on another node has the held lease's name (the pod uid): releasing the
    hold must give the cache that lease back, not drop it."""
    elsewhere = _lease("p", 12, node="m")
    ctx = _ctx(MemoryApi([], []), nodes=(NODE, "m"))
    ctx.cache.set_lease(elsewhere)
    release(ctx.cache, ctx.ledgers, hold(ctx.cache, ctx.ledgers, _lease("p", 12)), known=True)
    assert ctx.cache.leases == {elsewhere.key: elsewhere}


# ---- reserve ------------------------------------------------------------------------------------
def test_reserve_holds_the_lease_in_memory_and_writes_nothing() -> None:
    """The GpuLease is created after the Binding (lease_writer): reserve only plans and holds."""
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(got, Reservation) and got.new
    assert got.lease.slices[0].offset_bytes == 20 * GiB  # beside the lease just listed
    assert _state(ctx) == ({"t/uid-other", "t/uid-p"}, {"t/uid-other", "t/uid-p"})
    assert set(api.leases) == {"t/uid-other"}
    assert "create_lease" not in api.calls


def test_a_list_that_fails_leaves_nothing_held() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    api.fail["leases_on_node"] = ConnectionError("API server unreachable")
    cache_before = dict(ctx.cache.leases)
    with pytest.raises(ConnectionError):
        asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert ctx.cache.leases == cache_before
    assert ctx.ledgers[NODE].stale(10.0, NOW)


def test_a_retried_bind_finds_its_lease_and_creates_nothing() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("p", 12)])
    ctx = _ctx(api)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert got == Reservation(_lease("p", 12), held=None)
    assert "create_lease" not in api.calls


def test_a_stale_reservation_elsewhere_of_an_unbound_pod_is_released_and_the_pod_placed() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("p", 12, node="m")])
    ctx = _ctx(api, nodes=(NODE, "m"))
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(got, Reservation) and got.lease.node == NODE
    assert api.leases == {}  # the stale one deleted; the pod's own comes after its Binding
    assert ctx.cache.leases["t/uid-p"].node == NODE


def test_an_active_lease_elsewhere_is_a_typed_refusal() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("p", 12, node="m", phase=LeasePhase.ACTIVE)])
    ctx = _ctx(api, nodes=(NODE, "m"))
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(got, Refusal) and got.why is Why.LEASE_ELSEWHERE
    assert set(api.leases) == {"t/uid-p"} and ctx.cache.leases["t/uid-p"].node == "m"


def test_a_full_node_is_refused_with_the_reason_and_nothing_held() -> None:
    api = MemoryApi([_pod_json("p", 60)], [_lease("other", 60)])
    ctx = _ctx(api)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(got, Refusal) and got.why is Why.NO_LONGER_FITS
    assert _state(ctx) == ({"t/uid-other"}, {"t/uid-other"})


# ---- unreserve and the whole bind ---------------------------------------------------------------
def test_unreserve_lets_go_of_exactly_the_held_lease_and_writes_nothing() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(got, Reservation)
    asyncio.run(unreserve(ctx, got))
    assert set(api.leases) == {"t/uid-other"} and "delete_lease" not in api.calls
    assert _state(ctx) == ({"t/uid-other"}, {"t/uid-other"})
    assert not ctx.ledgers[NODE].stale(10.0, NOW)  # sure: nothing was written


def test_unreserve_of_a_lease_that_stood_deletes_it() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("p", 12)])
    ctx = _ctx(api)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))  # a retried bind: it stood
    assert isinstance(got, Reservation) and not got.new
    asyncio.run(unreserve(ctx, got))
    assert api.leases == {} and _state(ctx) == (set(), set())


def test_a_failed_binding_unreserves_exactly_what_was_reserved() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    api.fail["bind_pod"] = ConnectionError("reset")
    result = asyncio.run(bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE))
    assert "failed: reset" in result.error and result.reason == "WriteFailed"
    assert api.calls[-2:] == ["bind_pod", "get_pod"]  # bound anyway? no: unreserve, in memory
    assert set(api.leases) == {"t/uid-other"} and "create_lease" not in api.calls
    assert _state(ctx) == ({"t/uid-other"}, {"t/uid-other"})
    assert api.pods["p"]["spec"].get("nodeName") is None
    assert not ctx.ledgers[NODE].stale(10.0, NOW)  # the read said: not bound


def test_a_binding_whose_outcome_no_read_can_tell_has_the_node_and_pods_read_again() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    api.fail["bind_pod"] = ConnectionError("reset")
    api.fail["get_pod"] = ConnectionError("still down")
    result = asyncio.run(bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE))
    assert result.reason == "WriteFailed" and "failed: reset" in result.error
    assert _state(ctx) == ({"t/uid-other"}, {"t/uid-other"})  # let go of, in memory
    assert ctx.ledgers[NODE].stale(10.0, NOW) and ctx.ledgers.pods_due()  # it may have
    # landed: the node's leases and the bound pods are read before its next plan there


def test_a_binding_whose_reply_was_lost_keeps_the_lease() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ctx = _ctx(api)

    async def lands_then_fails(*args: Any, **kw: Any) -> None:
        await MemoryApi.bind_pod(api, *args, **kw)
        raise TimeoutError("no reply")

    api.bind_pod = lands_then_fails  # type: ignore[method-assign]
    result = asyncio.run(_bind_and_drain(ctx, _pod(api, "p")))
    assert result.error == ""
    assert set(api.leases) == {"t/uid-p"} and "t/uid-p" in ctx.cache.leases
    assert "delete_lease" not in api.calls


def test_a_bound_pod_is_annotated_not_bound_again() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("p", 12)])
    api.pods["p"]["spec"]["nodeName"] = NODE
    ctx = _ctx(api)
    result = asyncio.run(bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE))
    assert result.error == ""
    assert "bind_pod" not in api.calls and "annotate_pod" in api.calls
    assert api.pods["p"]["metadata"]["annotations"]["gpupool.io/lease"] == "t/uid-p"


def test_a_binding_carries_the_allocation_and_lease_annotations() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ctx = _ctx(api)
    result = asyncio.run(bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE))
    assert result.error == ""
    assert ctx.cache.bound == {"t/uid-p"}  # its lease, deleted before it says Bound, stays held
    annotations = api.pods["p"]["metadata"]["annotations"]
    assert annotations["gpupool.io/lease"] == "t/uid-p"
    assert '"sizeBytes":12884901888' in annotations["gpupool.io/allocation"]
    assert api.pods["p"]["spec"]["nodeName"] == NODE


def test_bind_refuses_a_replaced_pod_by_its_uid() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ext = Extender(_cache((NODE,), []), api, policy="binpack")
    args = ExtenderBindingArgs(pod_name="p", pod_namespace="t", pod_uid="uid-old", node=NODE)
    result = asyncio.run(ext.bind(args))
    assert "it was replaced" in result.error and result.reason == "PodReplaced"
    assert api.calls == ["get_pod"]


# ---- the pod, decoded once ----------------------------------------------------------------------
def test_a_pod_decodes_once_into_what_bind_and_filter_need() -> None:
    admitted = '{"at":"2026-01-01T00:00:00Z","borrowed":250,"resource":"gpu","amount":250}'
    raw = _pod_json(
        "p",
        12,
        labels={"gpupool.io/tenant": "team-a"},
        annotations={"gpupool.io/placement-policy": " spread ", "gpupool.io/admitted": admitted},
    )
    pod = ScheduledPod.from_json({**raw, "spec": {**raw["spec"], "nodeName": "m"}})
    assert (pod.namespace, pod.name, pod.uid, pod.node_name) == ("t", "p", "uid-p", "m")
    assert pod.request.tenant == "team-a" and pod.request.gpu_memory_bytes == 12 * GiB
    assert pod.policy == "spread"
    assert (pod.admitted.resource, pod.admitted.amount, pod.admitted.borrowed) == ("gpu", 250, 250)
    assert pod.refusal() is None


def test_a_pod_that_cannot_be_read_or_asks_for_no_gpu_is_a_typed_refusal() -> None:
    bad = ScheduledPod.from_json(_pod_json("p", 0, limits={"gpupool.io/gpu-memory": "-3"}))
    refused = bad.refusal()
    assert refused is not None and refused.why is Why.BAD_REQUEST
    assert "gpu-memory" in refused.message
    refused = ScheduledPod.from_json(_pod_json("q", 0)).refusal()
    assert refused == Refusal(Why.NO_GPU, "pod t/q asks for no gpupool GPU")


# ---- admitting binds ----------------------------------------------------------------------------
def test_the_pod_filter_decoded_is_bound_without_reading_it_again() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ext = Extender(_cache((NODE,), []), api, policy="binpack")
    ext.filter(ExtenderArgs.from_json({"Pod": api.pods["p"], "NodeNames": [NODE]}))
    args = ExtenderBindingArgs(pod_name="p", pod_namespace="t", pod_uid="uid-p", node=NODE)
    assert asyncio.run(ext.bind(args)).error == ""
    assert "get_pod" not in api.calls
    assert api.pods["p"]["spec"]["nodeName"] == NODE


def _free_gib(cache: ClusterCache, node: str) -> float:
    snap = cache.snapshot()
    return float(snap.gmem_free[snap.index[node]].sum()) / GiB


def test_filters_pick_counts_until_its_bind_and_the_pod_is_counted_once() -> None:
    """/filter answers the pick alone and counts it on the snapshot: the next pod's filter,
    sent before this pod's bind, sees the card taken; the bind takes over the count (the pod
    is counted once, never twice) and an abandoned pick is swept."""
    api = MemoryApi([_pod_json("p", 40), _pod_json("q", 40), _pod_json("r", 8)], [])
    cache = _cache(("a", "b"), [])
    clock = [1_000.0]
    ext = Extender(cache, api, policy="binpack", clock=lambda: clock[0])
    empty = _free_gib(cache, "a")

    def filtered(name: str) -> tuple[str, ...] | None:
        args = ExtenderArgs.from_json({"Pod": api.pods[name], "NodeNames": ["a", "b"]})
        return ext.filter(args).node_names

    assert filtered("p") == ("a",)  # both empty: the first by name
    assert cache.picks() == {"t/uid-p"} and _free_gib(cache, "a") == empty - 40
    assert filtered("q") == ("b",)  # a's one card has 32Gi left: p's pick is counted
    assert filtered("p") == ("a",)  # filtered again: its own last pick does not count against it
    assert _free_gib(cache, "a") == empty - 40
    args = ExtenderBindingArgs(pod_name="p", pod_namespace="t", pod_uid="uid-p", node="a")
    assert asyncio.run(ext.bind(args)).error == ""
    assert "t/uid-p" not in cache.picks() and "t/uid-p" in cache.leases
    assert _free_gib(cache, "a") == empty - 40  # the lease counts now, the pick no more
    assert cache.picks() == {"t/uid-q"}  # q's bind has not come
    clock[0] += 20  # longer than a bind takes: kube-scheduler gave q up
    asyncio.run(ext._tick())
    assert cache.picks() == set() and _free_gib(cache, "b") == empty


def test_a_bind_to_another_node_than_the_pick_counts_the_pod_there_only() -> None:
    api = MemoryApi([_pod_json("p", 40)], [])
    cache = _cache(("a", "b"), [])
    ext = Extender(cache, api, policy="binpack")
    empty = _free_gib(cache, "a")
    assert ext.filter(
        ExtenderArgs.from_json({"Pod": api.pods["p"], "NodeNames": ["a", "b"]})
    ).node_names == ("a",)
    args = ExtenderBindingArgs(pod_name="p", pod_namespace="t", pod_uid="uid-p", node="b")
    assert asyncio.run(ext.bind(args)).error == ""
    assert (_free_gib(cache, "a"), _free_gib(cache, "b")) == (empty, empty - 40)


def test_a_bind_that_finds_no_slot_is_refused_and_writes_nothing() -> None:
    api = MemoryApi([_pod_json("p", 12), _pod_json("q", 12)], [])
    ext = Extender(_cache((NODE,), []), api, policy="binpack", max_binds=1, bind_wait_s=0.05)
    entered, release_first = asyncio.Event(), asyncio.Event()
    bind = api.bind_pod

    async def slow_bind(*args: Any, **kw: Any) -> None:
        entered.set()
        await release_first.wait()
        await bind(*args, **kw)

    api.bind_pod = slow_bind  # type: ignore[method-assign]

    def args(name: str) -> ExtenderBindingArgs:
        return ExtenderBindingArgs(name, "t", f"uid-{name}", NODE)

    async def main() -> tuple[str, str]:
        first = asyncio.ensure_future(ext.bind(args("p")))
        await asyncio.wait_for(entered.wait(), timeout=10)  # hang guard
        second = await ext.bind(args("q"))  # the one slot is taken
        release_first.set()
        answer = (await first).error, second.error
        await ext.binder.ctx.leases.drain()  # type: ignore[union-attr]
        return answer

    first, second = asyncio.run(main())
    assert first == ""
    assert "busy: 1 binds in flight" in second and "t/q not bound" in second
    assert set(api.leases) == {"t/uid-p"}


async def _bind_and_drain(ctx: BindContext, pod: ScheduledPod) -> Any:
    """Bind, then wait for the GpuLease the bind left to the background writer."""
    result = await bind_pod(ctx, GangHolds(), pod, NODE)
    await ctx.leases.drain()
    return result


# ---- the bind's own checks: admission record, the pod's node constraints, orphans --------------
def _bind(api: MemoryApi, ctx: BindContext, name: str, node: str = NODE) -> str:
    return asyncio.run(bind_pod(ctx, GangHolds(), _pod(api, name), node)).error


def test_a_tenant_pod_without_an_admission_record_is_not_bound() -> None:
    tenant = {"gpupool.io/tenant": "team-a"}
    api = MemoryApi([_pod_json("p", 12, labels=tenant)], [])
    ctx = _ctx(api)
    error = _bind(api, ctx, "p")
    assert "has no valid gpupool.io/admitted record" in error, error
    assert api.calls == [] and api.leases == {}  # nothing reserved, nothing written
    record = '{"at":"2026-01-01T00:00:00Z","borrowed":0,"preemptible":false}'
    admitted = _pod_json("q", 12, labels=tenant, annotations={"gpupool.io/admitted": record})
    api.pods["q"] = admitted
    assert _bind(api, ctx, "q") == ""


def test_bind_refuses_a_node_the_pods_selector_excludes() -> None:
    api = MemoryApi([_pod_json("p", 12, hostname="m")], [])
    cache = ClusterCache()
    host = "kubernetes.io/hostname"
    cache.rebuild([read_node(node_json(n, cards=1, labels={host: n})) for n in (NODE, "m")], [], [])
    ctx = BindContext(cache, api, Planners("binpack"), monotonic=lambda: NOW)
    error = _bind(api, ctx, "p", NODE)
    assert error == (
        "pod t/p may not run on n: the pod's nodeSelector asks for kubernetes.io/hostname=m; "
        "node n has kubernetes.io/hostname=n"
    ), error
    assert "create_lease" not in api.calls and "bind_pod" not in api.calls
    assert _bind(api, ctx, "p", "m") == ""


def test_a_lease_the_controller_restores_after_the_list_still_holds_its_bytes() -> None:
    """The chaos e2e's double booking: the node's leases were listed while a running pod's lease
    was deleted (its bytes held as an orphan); the controller then made the lease again, which
    ends the orphan, and only the watch says so. The next plan on that node, from the same list,
    must still go around those bytes: here the 16Gi hole they fill is the best fit for a 16Gi
    pod, and the card has room elsewhere."""
    first = _lease("first", 24, phase=LeasePhase.ACTIVE)  # [0, 24)
    running = replace(
        _lease("run", 16, phase=LeasePhase.ACTIVE),
        slices=(Slice(0, f"GPU-{NODE}-0", "A100-80GB", 24 * GiB, 16 * GiB, 0),),  # [24, 40)
    )
    api = MemoryApi([_pod_json("p", 8), _pod_json("b", 16)], [first, running])
    ctx = _ctx(api)
    del api.leases[running.key]  # `kubectl delete gl`
    assert ctx.cache.lose_lease(running.key)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))  # lists: the orphan is not in it
    assert isinstance(got, Reservation) and got.lease.slices[0].offset_bytes == 40 * GiB
    api.leases[running.key] = running  # the controller restores it; the watch tells the cache
    ctx.cache.set_lease(running)
    assert running.key not in ctx.cache.orphans
    placed = asyncio.run(reserve(ctx, _pod(api, "b"), NODE))  # from the same list
    assert isinstance(placed, Reservation), placed
    assert placed.lease.slices[0].offset_bytes == 48 * GiB  # beside them, not over [24, 40)


def test_reserve_lays_a_slice_around_an_orphan_no_list_shows() -> None:
    """A running pod's lease was deleted (kept in the cache as an orphan): a fresh list of the
    node lacks it, and the next slice must still go beside its bytes."""
    running = _lease("run", 60, phase=LeasePhase.ACTIVE)
    api = MemoryApi([_pod_json("p", 12)], [running])
    ctx = _ctx(api)
    del api.leases[running.key]  # `kubectl delete gl`; the watch tells the cache
    assert ctx.cache.lose_lease(running.key)
    got = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))  # lists the node afresh
    assert isinstance(got, Reservation), got
    assert got.lease.slices[0].offset_bytes == 60 * GiB
    assert running.key in ctx.cache.orphans  # the list did not drop it
    big = MemoryApi([_pod_json("b", 24)], [])
    big.leases = dict(api.leases)
    ctx2 = BindContext(ctx.cache, big, Planners("binpack"), monotonic=lambda: NOW)
    refused = asyncio.run(reserve(ctx2, _pod(big, "b"), NODE))  # 60 + 12 + 24 > 72Gi
    assert isinstance(refused, Refusal), refused


def test_a_lease_another_writer_made_wins_over_a_pick_in_its_way() -> None:
    """A pick is a guess and a lease the truth: a lease that arrives (the watch) where picks
    leave it no room is counted, the picks on its node stop counting, and the node is not
    fenced as if the lease did not fit its cards."""
    api = MemoryApi([_pod_json("p", 60)], [])
    cache = _cache(("a",), [])
    ext = Extender(cache, api, policy="binpack")
    empty = _free_gib(cache, "a")
    args = ExtenderArgs.from_json({"Pod": api.pods["p"], "NodeNames": ["a"]})
    assert ext.filter(args).node_names == ("a",) and cache.picks() == {"t/uid-p"}
    cache.set_lease(_lease("restored", 40, node="a"))  # e.g. the controller's restore
    assert cache.picks() == set()
    assert _free_gib(cache, "a") == empty - 40
    snap = cache.snapshot()
    assert snap.condition[snap.index["a"]] is None  # not fenced
    assert ext.filter(args).node_names is None  # 60Gi no longer fits beside the 40Gi lease


def test_the_pods_own_lease_arriving_by_watch_replaces_its_pick() -> None:
    """On a standby the bind runs elsewhere (forwarded to the leader): the pick it counted at
    /filter must give way to the pod's lease when the watch brings it, not count beside it."""
    api = MemoryApi([_pod_json("p", 30)], [])
    cache = _cache(("a",), [])
    ext = Extender(cache, api, policy="binpack")
    empty = _free_gib(cache, "a")
    args = ExtenderArgs.from_json({"Pod": api.pods["p"], "NodeNames": ["a"]})
    assert ext.filter(args).node_names == ("a",) and _free_gib(cache, "a") == empty - 30
    cache.set_lease(_lease("p", 30, node="a"))  # the leader's lease for t/uid-p
    assert cache.picks() == set() and _free_gib(cache, "a") == empty - 30  # counted once
