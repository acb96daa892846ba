"""Bind's runner (bind.py): each named step on its own, the one conversion of a raised error into
a typed refusal (bind_failure.py), and the one undo: whatever fails after the reservation stood,
its in-memory hold is let go of exactly once and no GpuLease is written (the lease comes only
after the Binding); whatever fails before it, or after the Binding, undoes nothing.
Against test_bind_steps' in-memory API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.builders import node_json
from test_bind_steps import NODE, NOW, MemoryApi, _ctx, _lease, _pod, _pod_json, _state

from gpupool.adapters.extender_http.bind import bind_pod, finish, run_steps
from gpupool.adapters.extender_http.bind_check import check, decode
from gpupool.adapters.extender_http.bind_context import StepTimer
from gpupool.adapters.extender_http.bind_failure import INTERNAL, refusal_for
from gpupool.adapters.extender_http.bind_state import BindState, Step
from gpupool.adapters.extender_http.gang_hold import GangHolds
from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.reserve import Reservation, reserve
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs, ExtenderBindingArgs
from gpupool.adapters.kubernetes.errors import Conflict, NotFound
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.node import read_node
from gpupool.state.cluster import ClusterCache


def _args(name: str, node: str = NODE, uid: str | None = None) -> ExtenderBindingArgs:
    return ExtenderBindingArgs(name, "t", uid or f"uid-{name}", node)


# ---- decode -------------------------------------------------------------------------------------
def test_decode_takes_filters_copy_without_a_read_else_reads_the_pod() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    kept = _pod(api, "p")
    assert asyncio.run(decode(api, _args("p"), kept, StepTimer())) is kept
    assert api.calls == []
    assert asyncio.run(decode(api, _args("p"), None, StepTimer())) == kept
    assert api.calls == ["get_pod"]


def test_decode_refuses_a_pod_whose_uid_is_not_kube_schedulers() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    got = asyncio.run(decode(api, _args("p", uid="uid-old"), None, StepTimer()))
    assert isinstance(got, Refusal) and got.why is Why.REPLACED
    assert got.message == "pod t/p has uid uid-p, not uid-old: it was replaced"


# ---- check --------------------------------------------------------------------------------------
def test_check_refuses_a_pod_without_gpu_an_unknown_node_and_an_excluded_one() -> None:
    api = MemoryApi([_pod_json("p", 12, hostname="m"), _pod_json("q", 0)], [])
    cache = ClusterCache()
    host = "kubernetes.io/hostname"
    cache.rebuild([read_node(node_json(n, cards=1, labels={host: n})) for n in (NODE, "m")], [], [])
    no_gpu = check(cache, _pod(api, "q"), "m")
    assert no_gpu == Refusal(Why.NO_GPU, "pod t/q asks for no gpupool GPU")
    unknown = check(cache, _pod(api, "p"), "ghost")
    assert unknown == Refusal(Why.UNKNOWN_NODE, "node ghost is not in the extender's cache")
    excluded = check(cache, _pod(api, "p"), NODE)
    assert excluded is not None and excluded.why is Why.NODE_EXCLUDED
    assert check(cache, _pod(api, "p"), "m") is None


# ---- the one conversion -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "err", "why", "message"),
    [
        (Step.WRITE, ConnectionError("reset"), Why.WRITE_FAILED, "bind t/p to n failed: reset"),
        (Step.WRITE, NotLeader("Binding refused"), Why.NOT_LEADER, "Binding refused"),
        (Step.RESERVE, NotLeader("GpuLease refused"), Why.NOT_LEADER, "GpuLease refused"),
        (Step.DECODE, NotFound(404, "gone"), Why.API_ERROR, "at its decode step: API server"),
        (Step.RESERVE, Conflict(409, "x"), Why.API_ERROR, "at its reserve step"),
        (Step.GANG, TimeoutError("slow"), Why.API_ERROR, "at its gang step: slow"),
        (Step.CHECK, KeyError("bug"), Why.INTERNAL, INTERNAL),
    ],
)
def test_every_raised_error_becomes_one_typed_refusal(
    step: Step, err: Exception, why: Why, message: str
) -> None:
    refused = refusal_for(step, err, "t/p", NODE)
    assert refused.why is why and message in refused.message


# ---- the one undo -------------------------------------------------------------------------------
def _run(api: MemoryApi, name: str = "p", **kw: Any) -> tuple[str, str]:
    ctx = _ctx(api)
    result = asyncio.run(run_steps(ctx, GangHolds(), _args(name), **kw))
    cached, ledger = _state(ctx)  # undone in the cache; in the ledger, or it is untrusted
    assert cached == {"t/uid-other"}  # (a create of unknown outcome: re-listed next time)
    assert ledger <= {"t/uid-other"} or ctx.ledgers[NODE].stale(10.0, NOW)
    return result.reason, result.error


@pytest.mark.parametrize(
    ("err", "why"),
    [
        (ConnectionError("reset"), Why.WRITE_FAILED),
        (NotLeader("Binding refused: no longer leader"), Why.NOT_LEADER),
        (Conflict(409, "already assigned"), Why.WRITE_FAILED),
        (RuntimeError("a bug in the write"), Why.WRITE_FAILED),
    ],
)
def test_every_failure_after_the_reservation_unreserves_exactly_once(
    err: Exception, why: Why
) -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    api.fail["bind_pod"] = err
    reason, _ = _run(api)
    assert reason == why
    assert "create_lease" not in api.calls and "delete_lease" not in api.calls
    assert set(api.leases) == {"t/uid-other"}


@pytest.mark.parametrize(
    ("call", "err", "why"),
    [
        ("get_pod", ConnectionError("refused"), Why.API_ERROR),
        ("leases_on_node", NotFound(404, "no such resource"), Why.API_ERROR),
        ("held_by_bound_pods", NotLeader("no longer leader"), Why.NOT_LEADER),
        ("held_by_bound_pods", ConnectionError("reset"), Why.API_ERROR),
    ],
)
def test_a_failure_before_the_reservation_stood_deletes_nothing(
    call: str, err: Exception, why: Why
) -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    api.fail[call] = err
    reason, error = _run(api)
    assert reason == why, error
    assert "delete_lease" not in api.calls and set(api.leases) == {"t/uid-other"}


def test_an_unreserve_that_fails_still_answers_the_first_failure_and_forgets_the_lease() -> None:
    """A retried bind's reservation is the lease that stood: its undo deletes it."""
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    stood = _lease("p", 12)
    state = BindState("t/p", NODE, Step.WRITE, reservation=Reservation(stood, held=None))
    api.fail["delete_lease"] = ConnectionError("still down")
    refused = Refusal(Why.WRITE_FAILED, "bind t/p to n failed: reset")
    assert asyncio.run(finish(ctx, state, refused)) is refused
    assert api.calls.count("delete_lease") == 1


def test_a_failure_after_the_binding_stood_undoes_nothing() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    reserved = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(reserved, Reservation)
    state = BindState("t/p", NODE, Step.HOLD_GANG, reservation=reserved, bound=True)
    assert asyncio.run(finish(ctx, state, RuntimeError("holding the gang's room"))) is None
    assert "delete_lease" not in api.calls and "t/uid-p" in ctx.cache.leases
    assert "t/uid-p" in {x.key for x in ctx.ledgers[NODE].leases()}


def test_a_refusal_after_the_reservation_is_undone_through_the_same_place() -> None:
    api = MemoryApi([_pod_json("p", 12)], [_lease("other", 20)])
    ctx = _ctx(api)
    reserved = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(reserved, Reservation)
    state = BindState("t/p", NODE, Step.WRITE, reservation=reserved)
    refused = Refusal(Why.WRITE_FAILED, "no")
    assert asyncio.run(finish(ctx, state, refused)) is refused
    assert "delete_lease" not in api.calls  # only held in memory: let go of there
    assert _state(ctx) == ({"t/uid-other"}, {"t/uid-other"})


# ---- no more API calls than the bind needs; filter's plan reused --------------------------------
def test_a_bind_after_filter_makes_only_its_lists_binding_and_then_the_lease() -> None:
    """The first bind lists the node's leases and reads the bound pods; the bind answers after
    the Binding; the lease is created after it. A second bind on the node lists nothing."""
    api = MemoryApi([_pod_json("p", 12), _pod_json("q", 12)], [])
    ext = Extender(_ctx(api).cache, api, policy="binpack")
    assert ext.binder is not None
    ext.filter(ExtenderArgs.from_json({"Pod": api.pods["p"], "NodeNames": [NODE]}))
    # filter counted its pick on the snapshot (filter_pick.py): the cache changed since the
    # plan, so bind plans again (in memory: no API call more)
    assert ext.cache.picks() == {"t/uid-p"} and ext.plans.current(_pod(api, "p")) is None

    async def main() -> list[str]:
        assert (await ext.bind(_args("p"))).error == ""
        answered = list(api.calls)
        await ext.binder.ctx.leases.drain()  # type: ignore[union-attr]
        return answered

    assert asyncio.run(main()) == ["leases_on_node", "held_by_bound_pods", "bind_pod"]
    assert api.calls[3:] == ["create_lease"] and "t/uid-p" in api.leases
    assert asyncio.run(ext.bind(_args("q"))).error == ""
    assert api.calls[4:6] == ["get_pod", "bind_pod"]


def test_filters_plan_is_reused_only_while_the_cache_is_unchanged() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ctx = _ctx(api)
    memo = PlanMemo(ctx.cache, ctx.planners)
    pod = _pod(api, "p")
    assert memo.current(pod) is None  # nothing planned: nothing computed either
    plan = memo.plan(pod)
    assert memo.current(pod) is plan
    ctx.cache.set_lease(_lease("other", 20))
    assert memo.current(pod) is None


def test_bind_pod_runs_the_steps_from_check_on() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    result = asyncio.run(bind_pod(_ctx(api), GangHolds(), _pod(api, "p"), NODE))
    assert result.error == "" and "get_pod" not in api.calls
