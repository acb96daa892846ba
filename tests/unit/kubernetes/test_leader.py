"""Leader election (shared by the extender and the controller): the pure `decide` and
LeaderElector against a small in-memory API server (get/create/replace of one coordination Lease
with resourceVersion conflicts) on a clock the test moves. The invariant every test keeps: two
replicas are never both leader."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from support.bind_api import BindApi, one_card_cache
from support.lease_api import NAME, NS, Clock, FakeLeaseApi
from support.waiting import wait_until_async

from gpupool.adapters.extender_http.leader import LeaderOnlyWrites
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderBindingArgs, ExtenderBindingResult
from gpupool.adapters.kubernetes.leader import (
    LEADER_URL_ANNOTATION,
    LeaderElector,
    Seen,
    Step,
    decide,
)

LEASE_S, DEADLINE_S, RETRY_S = 15, 10.0, 2.0


def _elector(api: FakeLeaseApi, clock: Clock, identity: str, **kw: Any) -> LeaderElector:
    return LeaderElector(
        cast(AsyncClient, api),
        NS,
        NAME,
        identity,
        lease_s=LEASE_S,
        renew_deadline_s=DEADLINE_S,
        retry_s=RETRY_S,
        clock=clock,
        **kw,
    )


async def _round(elector: LeaderElector) -> None:
    """One election round as `run` does it: a failure is logged, not raised."""
    with contextlib.suppress(Exception):
        await elector._try()


def _one_leader_at_most(*electors: LeaderElector) -> None:
    leaders = [e.identity for e in electors if e.is_leader()]
    assert len(leaders) <= 1, f"both lead: {leaders}"


# ---- decide ------------------------------------------------------------------------------------


def test_decide_takes_a_free_or_released_lease_at_once() -> None:
    assert decide("a", None, 15, "1", Seen(None, 0.0), 5.0) == (Step.TAKE_OVER, Seen("1", 5.0))
    assert decide("a", "", 15, "1", Seen("1", 4.0), 5.0)[0] is Step.TAKE_OVER


def test_decide_renews_its_own_lease() -> None:
    assert decide("a", "a", 15, "7", Seen("7", 0.0), 99.0)[0] is Step.RENEW


def test_decide_follows_until_the_record_is_unchanged_for_its_duration() -> None:
    seen = Seen(None, 0.0)
    step, seen = decide("b", "a", 15, "1", seen, 10.0)
    assert step is Step.FOLLOW and seen == Seen("1", 10.0)  # first sight starts the count
    assert decide("b", "a", 15, "1", seen, 25.0)[0] is Step.FOLLOW  # exactly the duration
    assert decide("b", "a", 15, "1", seen, 25.01)[0] is Step.TAKE_OVER


def test_decide_restarts_the_count_on_every_renewal() -> None:
    step, seen = decide("b", "a", 15, "1", Seen("1", 0.0), 14.0)
    assert step is Step.FOLLOW
    step, seen = decide("b", "a", 15, "2", seen, 20.0)  # renewed: counts from now
    assert step is Step.FOLLOW and seen == Seen("2", 20.0)
    assert decide("b", "a", 15, "2", seen, 34.0)[0] is Step.FOLLOW
    assert decide("b", "a", 15, "2", seen, 35.5)[0] is Step.TAKE_OVER


def test_decide_uses_the_holders_duration_not_its_own() -> None:
    assert decide("b", "a", 60, "1", Seen("1", 0.0), 30.0)[0] is Step.FOLLOW


def test_the_renew_deadline_must_be_under_the_lease() -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            cast(AsyncClient, FakeLeaseApi()), NS, NAME, "a", lease_s=10, renew_deadline_s=10
        )


# ---- LeaderElector against the fake API server ------------------------------------------------


def test_acquires_a_lease_nobody_holds_and_renews_it() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a = _elector(api, clock, "a")
        assert not a.is_leader()
        await a._try()
        assert a.is_leader() and api.holder() == "a"
        assert api.spec().leaseTransitions == 0
        assert api.spec().leaseDurationSeconds == LEASE_S
        rv = api.leases[NAME].metadata.resourceVersion
        clock.t += RETRY_S
        await a._try()
        assert a.is_leader() and api.holder() == "a"
        assert api.leases[NAME].metadata.resourceVersion != rv  # a renewal others can see
        assert api.spec().leaseTransitions == 0

    asyncio.run(main())


def test_a_candidate_never_steals_from_a_holder_that_renews() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
        await a._try()
        for _ in range(int(3 * LEASE_S / RETRY_S)):
            clock.t += RETRY_S
            await b._try()
            await a._try()
            assert a.is_leader() and not b.is_leader()
        assert api.holder() == "a"

    asyncio.run(main())


def test_takes_over_only_after_the_lease_of_a_silent_holder_expired() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
        await a._try()
        await b._try()  # sees a's record now
        t_seen = clock.t
        # a dies: nothing renews. b polls every 0.5 s and holds off for the whole lease.
        while clock.t - t_seen <= LEASE_S:
            assert not b.is_leader() and api.holder() == "a"
            _one_leader_at_most(a, b)
            clock.t += 0.5
            await b._try()
        assert b.is_leader() and api.holder() == "b"
        assert clock.t - t_seen > LEASE_S
        assert not a.is_leader()  # its renew deadline ran out long before
        assert api.spec().leaseTransitions == 1

    asyncio.run(main())


def test_a_holder_cut_off_from_the_api_stops_leading_before_anyone_can_take_over() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
        await a._try()
        last_write = clock.t
        await b._try()
        a_down = True
        while not b.is_leader():
            clock.t += 0.25
            api.down = a_down  # a's calls fail, b's go through
            await _round(a)
            api.down = False
            await _round(b)
            _one_leader_at_most(a, b)
            if clock.t - last_write < DEADLINE_S:
                assert a.is_leader()  # failed renewals keep it leader until the deadline
            else:
                assert not a.is_leader()
        assert clock.t - last_write > LEASE_S
        # a's API comes back: its renewal finds b's lease and it follows.
        await a._try()
        assert not a.is_leader() and b.is_leader() and api.holder() == "b"

    asyncio.run(main())


def test_a_slow_renewal_reply_does_not_stretch_the_leadership() -> None:
    """The write lands when the round starts; the reply comes 6 s later. Counting the deadline
    from the reply would make a lead until 16 s after the write, while b, which saw the write
    at once, takes it over after 15 s: the deadline counts from the start of the round."""

    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
        await a._try()
        t_write = clock.t

        async def slow_reply() -> None:
            api.after_write = None
            await b._try()  # b sees the fresh write before a hears back
            clock.t += 6.0

        api.after_write = slow_reply
        await a._try()
        assert a.is_leader() and not b.is_leader()
        clock.t = t_write + LEASE_S + 0.5
        await b._try()
        assert b.is_leader() and api.holder() == "b"
        _one_leader_at_most(a, b)

    asyncio.run(main())


def test_two_candidates_racing_for_a_free_lease_elect_one() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
        await asyncio.gather(_round(a), _round(b))  # both find no Lease, both create: one 409
        assert [e.identity for e in (a, b) if e.is_leader()] == [api.holder()]

    asyncio.run(main())


def test_two_candidates_racing_for_an_expired_lease_elect_one() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        old, a, b = (_elector(api, clock, i) for i in ("old", "a", "b"))
        await old._try()
        await asyncio.gather(_round(a), _round(b))
        clock.t += LEASE_S + 1
        await asyncio.gather(_round(a), _round(b))  # both read one rv; one replace is a 409
        leaders = [e.identity for e in (old, a, b) if e.is_leader()]
        assert len(leaders) == 1 and leaders == [api.holder()]
        assert api.spec().leaseTransitions == 1

    asyncio.run(main())


def test_release_on_stop_lets_the_other_take_over_at_once() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
        await a._try()
        await b._try()
        await a.release()
        assert not a.is_leader() and not api.holder()
        clock.t += 0.1  # no lease duration to wait out
        await b._try()
        assert b.is_leader() and api.holder() == "b"
        await a.release()  # not leader: leaves b's lease alone
        assert api.holder() == "b"

    asyncio.run(main())


def test_run_elects_and_stops() -> None:
    async def main() -> None:
        api = FakeLeaseApi()
        a = LeaderElector(cast(AsyncClient, api), NS, NAME, "a", lease_s=2, renew_deadline_s=1.0)
        a.retry_s = 0.01
        stop = asyncio.Event()
        task = asyncio.ensure_future(a.run(stop))
        await wait_until_async(a.is_leader, 5, "a elected by its own rounds")
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        await a.release()
        assert not api.holder()

    asyncio.run(main())


def test_on_elected_runs_on_each_new_term_not_on_renewals() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        terms: list[bool] = []
        a = _elector(api, clock, "a", on_elected=lambda: terms.append(a.is_leader()))
        b = _elector(api, clock, "b")
        await a._try()
        assert terms == [False]  # called before is_leader() turns true
        clock.t += RETRY_S
        await a._try()
        assert len(terms) == 1
        await a.release()
        await b._try()
        await a._try()  # follows b
        await b.release()
        await a._try()  # a lease lost and regained between two binds: a new term
        assert a.is_leader() and len(terms) == 2
        # A renewal that lands after the renew deadline lapsed is a new term too.
        api.down = True
        clock.t += DEADLINE_S + 1
        await _round(a)
        assert not a.is_leader()
        api.down = False
        await a._try()
        assert a.is_leader() and len(terms) == 3

    asyncio.run(main())


# ---- the leader's URL on the Lease ------------------------------------------------------------


def _url_on_lease(api: FakeLeaseApi) -> str | None:
    annotations = api.leases[NAME].metadata.annotations or {}
    url: str | None = annotations.get(LEADER_URL_ANNOTATION)
    return url


def test_the_holder_writes_its_url_on_the_lease_it_creates_and_renews() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a = _elector(api, clock, "a", advertise_url="http://10.0.0.1:8888")
        await a._try()  # creates
        assert _url_on_lease(api) == "http://10.0.0.1:8888"
        writes = api.rv
        clock.t += RETRY_S
        await a._try()  # renews: the URL rides on the same write, no extra call
        assert api.rv == writes + 1
        assert _url_on_lease(api) == "http://10.0.0.1:8888"
        assert a.leader_url() is None  # the leader forwards to nobody

    asyncio.run(main())


def test_a_follower_learns_the_holders_url_and_forgets_it_once_the_lease_runs_out() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a = _elector(api, clock, "a", advertise_url="http://a:8888")
        b = _elector(api, clock, "b", advertise_url="http://b:8888")
        assert b.leader_url() is None  # nothing read yet
        await a._try()
        await b._try()
        assert b.leader_url() == "http://a:8888"
        for _ in range(3):  # a renews: b's knowledge stays fresh
            clock.t += RETRY_S
            await a._try()
            await b._try()
            assert b.leader_url() == "http://a:8888"
        # a dies; b's reads keep seeing the same record, which goes stale after the lease.
        last_change = clock.t
        while clock.t - last_change <= LEASE_S:
            assert b.leader_url() == "http://a:8888"
            clock.t += 0.5
            if clock.t - last_change <= LEASE_S:
                await b._try()
        assert b.leader_url() is None and not b.is_leader()
        await b._try()  # takes over: now it leads and writes its own URL
        assert b.is_leader() and b.leader_url() is None
        assert _url_on_lease(api) == "http://b:8888"

    asyncio.run(main())


def test_a_follower_cut_off_from_the_api_stops_trusting_the_url_it_read() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a = _elector(api, clock, "a", advertise_url="http://a:8888")
        b = _elector(api, clock, "b")
        await a._try()
        await b._try()
        api.down = True
        clock.t += LEASE_S - 1
        await _round(b)
        assert b.leader_url() == "http://a:8888"
        clock.t += 2
        await _round(b)
        assert b.leader_url() is None

    asyncio.run(main())


def test_a_holder_without_a_url_removes_the_one_its_predecessor_wrote() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a = _elector(api, clock, "a", advertise_url="http://a:8888")
        b = _elector(api, clock, "b")  # no --advertise-url
        c = _elector(api, clock, "c")
        api_annotations = {"other.io/keep": "yes"}
        await a._try()
        api.leases[NAME].metadata.annotations = {
            **api_annotations,
            LEADER_URL_ANNOTATION: "http://a:8888",
        }
        await b._try()
        await c._try()
        assert c.leader_url() == "http://a:8888"
        await a.release()  # a stops: the URL goes with its holder
        assert _url_on_lease(api) is None
        assert api.leases[NAME].metadata.annotations == api_annotations
        await c._try()  # free: c takes it, and has no URL to write
        assert c.is_leader()
        await b._try()  # follows c, which advertised nothing: a's URL is not c's
        assert not b.is_leader() and b.leader_url() is None
        assert api.leases[NAME].metadata.annotations == api_annotations

    asyncio.run(main())


def test_a_takeover_replaces_the_dead_holders_url() -> None:
    async def main() -> None:
        api, clock = FakeLeaseApi(), Clock()
        a = _elector(api, clock, "a", advertise_url="http://a:8888")
        b = _elector(api, clock, "b", advertise_url="http://b:8888")
        await a._try()
        await b._try()
        clock.t += LEASE_S + 1
        await b._try()
        assert b.is_leader() and _url_on_lease(api) == "http://b:8888"
        await a._try()  # a comes back and follows b, learning b's URL
        assert not a.is_leader() and a.leader_url() == "http://b:8888"

    asyncio.run(main())


# ---- LeaderOnlyWrites: a bind that outlives the term writes nothing ----------------------------


def _bind_setup(leader: list[bool]) -> tuple[Extender, BindApi]:
    api = BindApi()
    guarded = LeaderOnlyWrites(api, lambda: leader[0])
    return Extender(one_card_cache(), guarded, policy="binpack"), api


def _bind_args(name: str) -> ExtenderBindingArgs:
    return ExtenderBindingArgs(pod_name=name, pod_namespace="t", pod_uid=f"uid-{name}", node="n")


def test_a_leader_binds_through_the_guard() -> None:
    ext, api = _bind_setup([True])
    result = asyncio.run(_bind_and_drain(ext, "p"))
    assert result.error == ""
    assert api.writes == ["bind t/p n", "create t/uid-p"]  # the lease after the Binding


def test_a_bind_whose_replica_loses_the_lease_midway_writes_nothing() -> None:
    leader = [True]
    ext, api = _bind_setup(leader)
    api.during_read = lambda: leader.__setitem__(0, False)  # another replica takes over
    result = asyncio.run(ext.bind(_bind_args("p")))  # a typed refusal, counted by its reason
    assert result.reason == "NotLeader"
    assert result.error == (
        "Binding of t/p to n refused: this gpupool extender replica is no longer leader"
    )
    assert api.writes == []
    assert not ext.cache.leases  # the in-memory reservation is undone


async def _bind_and_drain(ext: Extender, name: str) -> ExtenderBindingResult:
    result = await ext.bind(_bind_args(name))
    assert ext.binder is not None
    await ext.binder.ctx.leases.drain()
    return result


def test_a_lead_lost_after_the_binding_leaves_the_pods_allocation_held() -> None:
    """The old leader's GpuLease create after the Binding is refused: the pod is bound all the
    same (its allocation on it), its slices stay held here, and the controller's restore (or the
    new leader, reading the node's bound pods) takes it from there."""
    leader = [True]
    ext, api = _bind_setup(leader)
    inner_bind = api.bind_pod

    async def bind_then_lose(*args: Any, **kw: Any) -> None:
        await inner_bind(*args, **kw)
        leader[0] = False

    api.bind_pod = bind_then_lose  # type: ignore[method-assign]
    result = asyncio.run(_bind_and_drain(ext, "p"))
    assert result.error == "", result
    assert api.writes == ["bind t/p n"]  # no GpuLease from a replica that no longer leads
    assert "t/uid-p" in ext.cache.orphans and "t/uid-p" in ext.cache.bound
