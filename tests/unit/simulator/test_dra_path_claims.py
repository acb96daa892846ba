"""The DRA path's claims: what a task consumes of a card, in the devices' whole steps."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.domain import GiB, Gpu, Node, Request, uniform_node
from gpupool.domain.dra_capacity import publishable_memory
from gpupool.domain.errors import InvalidNode
from gpupool.domain.units import MiB
from gpupool.placement import ClusterSnapshot, Decision, Planner
from gpupool.simulator.dra_claims import (
    Consumption,
    allocate_claim,
    claim_decision,
    consumption,
    dra_nodes,
)

T4 = 15360 * MiB
V100 = 16384 * MiB


def share(milli: int, name: str = "s") -> Request:
    return Request(name, cpu_milli=100, gpu_count=1, gpu_milli=milli)


def test_a_share_consumes_the_extender_paths_slice_down_to_a_whole_mib() -> None:
    # 0.81 of 15360 MiB is 12441.6 MiB: the extender path's slice is its floor in bytes, the
    # claim consumes 12441 MiB, so shares that fill a card together still fit together
    assert consumption(share(810), T4) == Consumption(12441 * MiB, 81)
    # 0.5 of 16384 MiB is a whole number of MiB: nothing to round
    assert consumption(share(500), V100) == Consumption(8192 * MiB, 50)


def test_compute_rounds_up_to_a_whole_percent() -> None:
    assert consumption(share(125), V100).compute_pct == 13
    assert consumption(share(120), V100).compute_pct == 12


def test_a_byte_request_rounds_up_and_keeps_its_percent() -> None:
    req = Request("b", gpu_count=1, gpu_memory_bytes=12 * GiB + 1, compute_pct=30)
    assert consumption(req, V100) == Consumption(12 * GiB + MiB, 30)


def test_a_whole_card_consumes_all_the_device_publishes() -> None:
    assert consumption(Request("w", gpu_count=2), V100 + 5) == Consumption(V100, 100)


def test_a_cpu_task_makes_no_claim() -> None:
    with pytest.raises(InvalidNode, match="no GPU"):
        consumption(Request("c", cpu_milli=1000), V100)


def test_device_memory_is_down_to_a_whole_step() -> None:
    assert publishable_memory(1000 * MiB + 5) == 1000 * MiB


def test_dra_nodes_give_undisclosed_cards_the_stand_in_size_only() -> None:
    nodes = [
        uniform_node("g", cpu_milli=1, memory_mib=1, gpu_count=2, model="G2"),
        uniform_node("t", cpu_milli=1, memory_mib=1, gpu_count=1, model="T4"),
    ]
    g, t = dra_nodes(nodes, 32 * GiB)
    assert [x.total_memory for x in g.gpus] == [32 * GiB, 32 * GiB]
    assert t.gpus[0].total_memory == T4
    with pytest.raises(InvalidNode, match="at least 1 MiB"):
        dra_nodes(nodes, 1000)


def test_a_card_of_unknown_size_cannot_be_a_device() -> None:
    snap = ClusterSnapshot(
        [uniform_node("g", cpu_milli=1000, memory_mib=1, gpu_count=1, model="G3")]
    )
    decision = Planner("best-fit").plan(snap, share(500))
    assert isinstance(decision, Decision)
    with pytest.raises(InvalidNode, match="dra_nodes"):
        claim_decision(snap, decision)


def v100_node() -> Node:
    return uniform_node("n", cpu_milli=8000, memory_mib=1 << 16, gpu_count=2, model="V100-16GB")


def test_two_shares_of_a_whole_card_share_it_on_both_paths() -> None:
    planner = Planner("best-fit")
    extender = ClusterSnapshot([v100_node()])
    cards = []
    for milli in (810, 190):
        d = planner.plan(extender, share(milli))
        assert isinstance(d, Decision)
        extender.assume(d)
        cards.append(d.cards)
    assert cards == [(0,), (0,)]

    dra = ClusterSnapshot([v100_node()])
    cards = []
    for milli in (810, 190):
        d = allocate_claim(planner, dra, share(milli))
        assert isinstance(d, Decision)
        dra.assume(d)
        cards.append(d.cards)
    # 810 consumes 13271 MiB (13271.04 down), 190 consumes 3112 MiB (3112.96 down): one card
    assert cards == [(0,), (0,)]
    assert int(dra.gmem_free[0, 0]) == 1 * MiB


def test_a_card_the_rounded_claim_overflows_is_passed_over_and_reopened() -> None:
    snap = ClusterSnapshot([v100_node()])
    # a slice reserved by the extender path leaves card 0 a free size that is no whole MiB
    before = Planner("best-fit").plan(snap, share(810))
    assert isinstance(before, Decision) and before.cards == (0,)
    snap.assume(before)
    assert int(snap.gmem_free[0, 0]) % MiB != 0
    # a byte request a byte over 3112 MiB fits the 3112.96 MiB left as asked, not as consumed
    odd = Request("b", cpu_milli=100, gpu_count=1, gpu_memory_bytes=3112 * MiB + 1)
    plain = Planner("best-fit").plan(snap, odd)
    assert isinstance(plain, Decision) and plain.cards == (0,)

    claim = allocate_claim(Planner("best-fit"), snap, odd)
    assert isinstance(claim, Decision)
    assert claim.cards == (1,) and claim.mem_bytes == (3113 * MiB,)
    assert not snap.closed.any() and not snap.any_closed


def test_a_claim_that_fits_nowhere_is_refused_and_leaves_every_card_open() -> None:
    node = Node("one", 8000, 1 << 16, (Gpu(0, "V100-16GB"),))
    snap = ClusterSnapshot([node])
    snap.assume(Planner("best-fit").plan(snap, share(810)))  # type: ignore[arg-type]
    odd = Request("b", cpu_milli=100, gpu_count=1, gpu_memory_bytes=3112 * MiB + 1)
    result = allocate_claim(Planner("best-fit"), snap, odd)
    assert not isinstance(result, Decision)
    assert "closed to new slices" in result.message
    assert not np.any(snap.closed)
