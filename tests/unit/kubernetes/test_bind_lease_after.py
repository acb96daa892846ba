"""The GpuLease after the Binding (lease_writer.py): the bind answers once the Binding stands, the
lease follows in the background, and until it stands the pod's slices stay held: in the node's
ledger while the create is in flight (a re-list keeps them), in the cache as an orphan when the
create is given up, and read back from the bound pods' allocations by a replica that starts or is
elected. Against test_bind_steps' in-memory API server."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from test_bind_steps import NODE, NOW, MemoryApi, _ctx, _lease, _pod, _pod_json

from gpupool.adapters.extender_http.bind import bind_pod
from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.gang_hold import GangHolds
from gpupool.adapters.extender_http.lease_writer import LeaseWriter
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.reserve import Reservation, reserve
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord


async def _no_pause(_: float) -> None:
    return None


def _quick(api: MemoryApi, attempts: int = 3) -> BindContext:
    """A context whose lease writer retries without pausing."""
    return replace(_ctx(api), leases=LeaseWriter(attempts=attempts, sleep=_no_pause))


def _offset(got: Reservation | Refusal) -> int:
    assert isinstance(got, Reservation), got
    return got.lease.slices[0].offset_bytes


def test_the_bind_answers_after_the_binding_and_the_lease_follows() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ctx = _quick(api)
    gate = asyncio.Event()
    create = api.create_lease

    async def slow_create(lease: LeaseRecord) -> LeaseRecord:
        await gate.wait()
        return await create(lease)

    api.create_lease = slow_create  # type: ignore[method-assign]

    async def main() -> None:
        result = await bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE)
        assert result.error == ""
        assert api.pods["p"]["spec"]["nodeName"] == NODE and api.leases == {}
        assert ctx.leases.in_flight == 1
        gate.set()
        await ctx.leases.drain()

    asyncio.run(main())
    assert set(api.leases) == {"t/uid-p"}
    assert ctx.cache.leases["t/uid-p"].resource_version == "1"  # the API server's copy


def test_a_lease_in_flight_is_kept_by_a_relist_and_planned_around() -> None:
    api = MemoryApi([_pod_json("p", 40), _pod_json("q", 40), _pod_json("r", 24)], [])
    ctx = _quick(api)
    gate = asyncio.Event()
    create = api.create_lease

    async def held_create(lease: LeaseRecord) -> LeaseRecord:
        await gate.wait()
        return await create(lease)

    api.create_lease = held_create  # type: ignore[method-assign]

    async def main() -> None:
        assert (await bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE)).error == ""
        ctx.ledgers[NODE].expire()  # the next bind re-lists: the API server has no lease yet
        refused = await reserve(ctx, _pod(api, "q"), NODE)  # 40 + 40 > 72Gi on the one card
        assert isinstance(refused, Refusal), refused
        assert _offset(await reserve(ctx, _pod(api, "r"), NODE)) == 40 * GiB
        gate.set()
        await ctx.leases.drain()

    asyncio.run(main())
    assert "t/uid-p" in api.leases


def test_a_create_that_fails_is_tried_again() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ctx = _quick(api)
    api.fail["create_lease"] = ConnectionError("API server unreachable")

    async def main() -> None:
        assert (await bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE)).error == ""
        await ctx.leases.drain()

    asyncio.run(main())
    assert api.calls.count("create_lease") == 2 and set(api.leases) == {"t/uid-p"}
    assert "t/uid-p" not in ctx.cache.orphans


def test_a_create_given_up_leaves_the_pods_slices_held_as_an_orphan() -> None:
    api = MemoryApi([_pod_json("p", 40), _pod_json("q", 40)], [])
    ctx = _quick(api, attempts=1)
    api.fail["create_lease"] = ConnectionError("API server unreachable")

    async def main() -> Reservation | Refusal:
        assert (await bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE)).error == ""
        await ctx.leases.drain()
        ctx.ledgers[NODE].expire()  # a fresh list lacks the lease: the orphan still counts
        return await reserve(ctx, _pod(api, "q"), NODE)

    refused = asyncio.run(main())
    assert api.leases == {} and "t/uid-p" in ctx.cache.orphans
    assert isinstance(refused, Refusal), refused  # 40 + 40 > 72Gi: no double booking


def test_a_lease_the_controller_restored_first_is_taken_as_the_lease() -> None:
    api = MemoryApi([_pod_json("p", 12)], [])
    ctx = _quick(api)
    create = api.create_lease

    async def restored_first(lease: LeaseRecord) -> LeaseRecord:
        await create(lease)  # the controller's restore, from the pod's allocation
        return await create(lease)  # ours: AlreadyExists

    api.create_lease = restored_first  # type: ignore[method-assign]

    async def main() -> None:
        assert (await bind_pod(ctx, GangHolds(), _pod(api, "p"), NODE)).error == ""
        await ctx.leases.drain()

    asyncio.run(main())
    assert "get_lease" in api.calls and set(api.leases) == {"t/uid-p"}
    assert "t/uid-p" not in ctx.cache.orphans and "t/uid-p" in ctx.cache.leases


def test_a_new_leader_reads_bound_pods_and_plans_around_a_lease_not_made_yet() -> None:
    """The old leader bound p (its allocation on the pod) and died before creating its lease: a
    replica that is elected (or starts) reads the node's bound pods with its first list."""
    api = MemoryApi([_pod_json("p", 40), _pod_json("q", 40), _pod_json("r", 24)], [])
    old = _quick(api)

    async def main() -> None:
        old.leases.submit = lambda ctx, lease: None  # type: ignore[method-assign]  # died here
        assert (await bind_pod(old, GangHolds(), _pod(api, "p"), NODE)).error == ""

    asyncio.run(main())
    assert api.leases == {} and api.pods["p"]["spec"]["nodeName"] == NODE
    new = _ctx(api)  # its cache from the lease list only (no pod watch)
    assert new.ledgers.pods_due()
    refused = asyncio.run(reserve(new, _pod(api, "q"), NODE))
    assert isinstance(refused, Refusal), refused  # 40 + 40 > 72Gi: p's allocation counted
    assert "held_by_bound_pods" in api.calls and "t/uid-p" in new.cache.orphans
    assert _offset(asyncio.run(reserve(new, _pod(api, "r"), NODE))) == 40 * GiB
    calls = len(api.calls)
    new.ledgers.forget()  # elected again: the next list reads the pods again
    assert new.ledgers.pods_due()
    asyncio.run(reserve(new, _pod(api, "q"), NODE))
    assert api.calls[calls:].count("held_by_bound_pods") == 1
    assert not new.ledgers[NODE].stale(10.0, NOW)


def test_creates_in_flight_are_bounded_and_the_rest_wait_their_turn() -> None:
    api = MemoryApi([_pod_json("p", 12), _pod_json("q", 12)], [])
    ctx = replace(_ctx(api), leases=LeaseWriter(max_creates=1, sleep=_no_pause))
    gate = asyncio.Event()
    create = api.create_lease
    started: list[str] = []

    async def held_create(lease: LeaseRecord) -> LeaseRecord:
        started.append(lease.key)
        await gate.wait()
        return await create(lease)

    api.create_lease = held_create  # type: ignore[method-assign]

    async def main() -> None:
        for name in ("p", "q"):
            assert (await bind_pod(ctx, GangHolds(), _pod(api, name), NODE)).error == ""
        for _ in range(5):
            await asyncio.sleep(0)  # let both writers run as far as they can
        assert started == ["t/uid-p"] and ctx.leases.in_flight == 2
        gate.set()
        await ctx.leases.drain()

    asyncio.run(main())
    assert set(api.leases) == {"t/uid-p", "t/uid-q"}


def test_an_ended_lease_of_the_pods_name_refuses_the_bind_as_its_create_would() -> None:
    """The pod's name is taken by a lease that ended and is not collected yet: its create after
    the Binding could not succeed, so the pod is not bound (as before, when the create came
    first)."""
    api = MemoryApi([_pod_json("p", 12)], [_lease("p", 12, phase=LeasePhase.RELEASED)])
    ctx = _quick(api)
    refused = asyncio.run(reserve(ctx, _pod(api, "p"), NODE))
    assert isinstance(refused, Refusal) and refused.why is Why.RETRIES, refused
    assert "bind_pod" not in api.calls and api.pods["p"]["spec"].get("nodeName") is None
