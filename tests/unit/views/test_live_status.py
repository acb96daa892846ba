"""`LiveStatus` (the web view's model, updated by what changed) against `build_status` (the views
built afresh from the same objects): after every change of a random sequence, and at clocks that
move, the two are equal, figure for figure."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pool_fixture import NOW, gpunode, lease, pod

from gpupool.adapters import views_json
from gpupool.adapters.web import delta
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.quota.spec import TenantQuota
from gpupool.state.nodes import NodeObject
from gpupool.state.views.inputs import QueueEntry, QuotaStatus
from gpupool.state.views.live import FULL_AT, LiveStatus
from gpupool.state.views.status import build_status

NODES = [f"node-{i}" for i in range(5)]
TENANTS = ["team-a", "team-b", "team-c"]
SIZES = (4, 8, 12, 24, 40, 72)


def _node(i: int, variant: int) -> NodeObject:
    return NodeObject(
        NODES[i], cordoned=variant == 1, not_ready="NodeStatusUnknown" if variant == 2 else None
    )


node_change = st.tuples(
    st.just("node"), st.integers(0, len(NODES) - 1), st.one_of(st.none(), st.integers(0, 2))
)
gpunode_change = st.tuples(
    st.just("gpunode"),
    st.integers(0, len(NODES) - 1),
    st.one_of(st.none(), st.tuples(st.integers(1, 4), st.sampled_from(["Healthy", "Lost"]))),
)
lease_change = st.tuples(
    st.just("lease"),
    st.integers(0, 11),  # which lease (a key); it may move node, size or phase
    st.one_of(
        st.none(),
        st.tuples(
            st.integers(0, len(NODES)),  # len(NODES): a node that is not there
            st.integers(0, 3),  # card
            st.integers(0, 60),  # offset GiB (overlaps happen: the node is fenced)
            st.sampled_from(SIZES),
            st.sampled_from([LeasePhase.ACTIVE, LeasePhase.BOUND, LeasePhase.RELEASED]),
            st.sampled_from(TENANTS),
        ),
    ),
)
pod_change = st.tuples(
    st.just("pod"),
    st.integers(0, 5),
    st.one_of(
        st.none(), st.tuples(st.sampled_from(TENANTS), st.booleans(), st.sampled_from(SIZES))
    ),
)
quota_change = st.tuples(
    st.just("quota"),
    st.integers(0, len(TENANTS) - 1),
    st.one_of(st.none(), st.tuples(st.integers(1, 200), st.integers(0, 3))),
)
tick = st.tuples(st.just("tick"), st.integers(0, 4000), st.none())
changes = st.lists(
    st.one_of(node_change, gpunode_change, lease_change, pod_change, quota_change, tick),
    max_size=40,
)


def apply(live: LiveStatus, change: tuple[str, int, object]) -> None:
    what, i, value = change
    if what == "node":
        live.set_node(NODES[i], None if value is None else _node(i, value))  # type: ignore[arg-type]
    elif what == "gpunode":
        got = None
        if value is not None:
            cards, health = value  # type: ignore[misc]
            got = gpunode(NODES[i], cards, health)
        live.set_gpunode(NODES[i], got)
    elif what == "lease":
        key = f"team/uid-p{i}"
        got = None
        if value is not None:
            n, card, offset, size, phase, tenant = value  # type: ignore[misc]
            node = NODES[n] if n < len(NODES) else "gone-node"
            end = NOW - 600 if phase.terminal else None
            got = lease(
                tenant, f"p{i}", node, [(card, offset, size)], phase=phase, end=end, ns="team"
            )
            assert got.key == key
        live.set_lease(key, got)
    elif what == "pod":
        got_pod = None
        if value is not None:
            tenant, gated, gib = value  # type: ignore[misc]
            got_pod = pod(tenant, f"w{i}", gib, gated=gated)
        live.set_pod(f"{got_pod.namespace if got_pod else 'x'}/w{i}", got_pod)
    elif what == "quota":
        tenant = TENANTS[i]
        if value is None:
            live.set_quota(tenant, None, None)
        else:
            nominal, queued = value  # type: ignore[misc]
            queue = tuple(QueueEntry(tenant, f"w{k}", k + 1, "waits") for k in range(queued))
            live.set_quota(
                tenant,
                TenantQuota(tenant, nominal=nominal * GiB),
                QuotaStatus(queued=queued, queue=queue),
            )


@settings(max_examples=300, deadline=None)
@given(changes)
def test_the_kept_view_equals_a_fresh_build_after_every_change(
    seq: list[tuple[str, int, object]],
) -> None:
    live = LiveStatus()
    now = NOW
    assert live.view(now) == build_status(live.inputs(), now)
    for change in seq:
        if change[0] == "tick":
            now = NOW + change[1]
        else:
            apply(live, change)
        assert live.view(now) == build_status(live.inputs(), now), change


def test_a_view_nothing_moved_is_the_same_object_and_a_tick_keeps_the_pool() -> None:
    live = LiveStatus()
    live.set_node("node-0", NodeObject("node-0"))
    live.set_gpunode("node-0", gpunode("node-0", 4))
    live.set_lease("team-a/uid-p", lease("team-a", "p", "node-0", [(0, 0, 12)]))
    first = live.view(NOW)
    assert live.view(NOW) is first
    assert not live.set_node("node-0", NodeObject("node-0"))  # equal: no change
    assert live.view(NOW) is first
    later = live.view(NOW + 30)
    assert later is not first and later.pool is first.pool  # time moves leases, not the map
    assert later.leases.live[0].held_s == first.leases.live[0].held_s + 30


def test_one_node_changed_keeps_the_other_nodes_views() -> None:
    live = LiveStatus()
    for name in NODES:
        live.set_node(name, NodeObject(name))
        live.set_gpunode(name, gpunode(name, 4))
    before = live.view(NOW)
    live.set_node("node-2", NodeObject("node-2", cordoned=True))
    after = live.view(NOW)
    assert after == build_status(live.inputs(), NOW)
    kept = [a is b for a, b in zip(before.pool.nodes, after.pool.nodes, strict=True)]
    assert kept == [True, True, False, True, True]


def test_many_nodes_at_once_take_the_full_pass_and_give_the_same() -> None:
    live = LiveStatus()
    names = [f"big-{i:03d}" for i in range(FULL_AT * 2)]
    for i, name in enumerate(names):
        live.set_node(name, NodeObject(name))
        live.set_gpunode(name, gpunode(name, 2, "Lost" if i % 7 == 0 else "Healthy"))
        live.set_lease(f"t/uid-{name}", lease("t", name, name, [(i % 2, 0, 8 + i % 3 * 4)], ns="t"))
    view = live.view(NOW)
    assert view == build_status(live.inputs(), NOW)
    assert len(view.pool.nodes) == len(names)


def test_of_two_leases_that_do_not_both_fit_the_first_that_came_is_placed() -> None:
    live = LiveStatus()
    live.set_node("node-0", NodeObject("node-0"))
    live.set_gpunode("node-0", gpunode("node-0", 1))
    live.set_lease("t/uid-b", lease("t", "b", "node-0", [(0, 0, 40)], ns="t"))
    live.set_lease("t/uid-a", lease("t", "a", "node-0", [(0, 32, 40)], ns="t"))
    view = live.view(NOW)
    assert [u.lease for u in view.pool.unplaced] == ["t/uid-a"]
    assert view == build_status(live.inputs(), NOW)
    live.set_lease("t/uid-b", lease("t", "b", "node-0", [(0, 0, 36)], ns="t"))  # keeps its place
    view = live.view(NOW)
    assert [u.lease for u in view.pool.unplaced] == ["t/uid-a"]
    assert view == build_status(live.inputs(), NOW)


def test_a_kept_node_view_keeps_its_json_and_the_diff_passes_it() -> None:
    live = LiveStatus()
    for name in NODES:
        live.set_node(name, NodeObject(name))
        live.set_gpunode(name, gpunode(name, 4))
    before = views_json.status_doc(live.view(NOW), None, None)
    live.set_node("node-2", NodeObject("node-2", cordoned=True))
    after = views_json.status_doc(live.view(NOW), None, None)
    shared = [a is b for a, b in zip(before["nodes"], after["nodes"], strict=True)]
    assert shared == [True, True, False, True, True]
    ops = delta.diff(before, after)
    assert delta.apply(before, ops) == after
    assert {op["path"].split("/")[2] for op in ops if op["path"].startswith("/nodes/")} == {"2"}
