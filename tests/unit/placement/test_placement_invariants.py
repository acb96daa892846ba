"""Properties: no card is ever over-committed; assume/forget restores the exact state."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain import MILLI, GiB, Request, uniform_node
from gpupool.placement import POLICIES, ClusterSnapshot, Decision, Planner, TargetWorkload
from gpupool.quota.resource import Resource, demand_of, held_amount

MODELS = ["A100-80GB", "RTX-3090", "T4", "G2"]

nodes_strategy = st.lists(
    st.tuples(st.integers(0, 8), st.sampled_from(MODELS), st.integers(1, 64)),
    min_size=1,
    max_size=6,
).map(
    lambda specs: [
        uniform_node(f"n{i}", cpu_milli=cpu * 1000, memory_mib=1 << 20, gpu_count=g, model=m)
        for i, (g, m, cpu) in enumerate(specs)
    ]
)


@st.composite
def requests_strategy(draw: st.DrawFn) -> Request:
    kind = draw(st.sampled_from(["share", "bytes", "whole", "cpu"]))
    cpu = draw(st.integers(0, 16)) * 1000
    name = f"r{draw(st.integers(0, 10**9))}"
    # one card mostly; sometimes a slice on each of several cards
    cards = draw(st.sampled_from([1, 1, 1, 2, 3, 8]))
    if kind == "share":
        return Request(name, cpu_milli=cpu, gpu_count=cards, gpu_milli=draw(st.integers(1, MILLI)))
    if kind == "bytes":
        return Request(
            name,
            cpu_milli=cpu,
            gpu_count=cards,
            gpu_memory_bytes=draw(st.integers(1, 48)) * GiB // 2,
            compute_pct=draw(st.one_of(st.none(), st.integers(1, 100))),
        )
    if kind == "whole":
        return Request(name, cpu_milli=cpu, gpu_count=draw(st.sampled_from([1, 2, 4, 8])))
    return Request(name, cpu_milli=cpu)


def check_not_overcommitted(snap: ClusterSnapshot) -> None:
    assert (snap.gmem_free >= 0).all()
    assert (snap.comp_free >= 0).all()
    assert (snap.cpu_free >= 0).all()
    assert (snap.gmem_free <= snap.gmem_total).all()
    assert (snap.comp_free[snap.present] <= MILLI).all()
    assert (snap.share_free >= 0).all()


@settings(max_examples=60, deadline=None)
@given(
    nodes=nodes_strategy,
    requests=st.lists(requests_strategy(), min_size=1, max_size=40),
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_no_card_is_ever_over_committed(
    nodes: list,
    requests: list[Request],
    policy: str,  # type: ignore[type-arg]
) -> None:
    snap = ClusterSnapshot(nodes)
    planner = Planner(policy, TargetWorkload.from_requests(requests), seed=1)
    placed: list[Decision] = []
    for req in requests:
        result = planner.plan(snap, req)
        if isinstance(result, Decision):
            snap.assume(result)
            placed.append(result)
        check_not_overcommitted(snap)
    # What the cards hold equals the sum of the decisions on them.
    used_mem = np.zeros_like(snap.gmem_total)
    used_cpu = np.zeros_like(snap.cpu_free)
    for d in placed:
        used_cpu[d.node_index] += d.request.cpu_milli
        for card, mem in zip(d.cards, d.mem_bytes, strict=True):
            used_mem[d.node_index, card] += mem
    assert (snap.gmem_total - snap.gmem_free == used_mem).all()
    assert (snap.cpu_cap - snap.cpu_free == used_cpu).all()


@settings(max_examples=60, deadline=None)
@given(
    nodes=nodes_strategy,
    requests=st.lists(requests_strategy(), min_size=1, max_size=30),
    data=st.data(),
)
def test_assume_then_forget_restores_the_exact_state(
    nodes: list,
    requests: list[Request],
    data: st.DataObject,  # type: ignore[type-arg]
) -> None:
    snap = ClusterSnapshot(nodes)
    initial = snap.state_key()
    planner = Planner("binpack")
    placed = []
    for req in requests:
        result = planner.plan(snap, req)
        if isinstance(result, Decision):
            before = snap.state_key()
            snap.assume(result)
            placed.append((result, before))
    # What-if: assume one more and forget it — nothing changes.
    probe = planner.plan(snap, requests[0])
    if isinstance(probe, Decision):
        key = snap.state_key()
        snap.assume(probe)
        snap.forget(probe)
        assert snap.state_key() == key
    # Forget everything in a random order: back to the initial state exactly.
    order = data.draw(st.permutations(range(len(placed))))
    for k in order:
        snap.forget(placed[k][0])
        check_not_overcommitted(snap)
    assert snap.state_key() == initial


@settings(max_examples=80, deadline=None)
@given(
    nodes=nodes_strategy,
    requests=st.lists(requests_strategy(), min_size=1, max_size=40),
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_every_placement_is_charged_for_what_it_holds(
    nodes: list,
    requests: list[Request],
    policy: str,  # type: ignore[type-arg]
) -> None:
    """The invariant of a lease's charge: what the quota core counts for a request (on the card
    it lands on) equals what its placed slices hold, in bytes and in milli-GPU; and a request of
    several cards holds a slice of its size on each of that many distinct cards."""
    snap = ClusterSnapshot(nodes)
    planner = Planner(policy, TargetWorkload.from_requests(requests), seed=1)
    for req in requests:
        result = planner.plan(snap, req)
        if not isinstance(result, Decision):
            continue
        snap.assume(result)
        allocation = result.allocation(snap)
        assert len(set(result.cards)) == len(result.cards) == req.gpu_count
        node = snap.nodes[result.node_index]
        if not req.wants_gpu or node.gpus[0].total_memory is None:
            continue  # cards of unknown memory: no byte figure to charge against
        card_bytes = {s.uuid: int(snap.gmem_total[result.node_index, 0]) for s in allocation.slices}
        size = int(snap.gmem_total[result.node_index, 0])
        for resource in Resource:
            assert held_amount(allocation.slices, resource, card_bytes) == demand_of(
                req, resource, size
            ), (req, resource, allocation)
