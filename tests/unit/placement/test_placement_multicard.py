"""A slice on each of several cards: `gpu: N` with a memory size or a share is N slices on N
distinct cards of one node, not N whole cards; whole cards only when asked."""

from __future__ import annotations

import pytest
from placement_builders import node, occupy, place

from gpupool.domain import GiB, Gpu, Node, Request
from gpupool.placement import (
    ClusterSnapshot,
    Decision,
    Planner,
    Reason,
    TargetWorkload,
    explain,
    feasibility,
)
from gpupool.placement.whatif import fits_without, room_bound


def slices(gib: float, cards: int, name: str = "m", compute: int | None = None) -> Request:
    return Request(
        name, cpu_milli=1000, gpu_count=cards, gpu_memory_bytes=int(gib * GiB), compute_pct=compute
    )


def test_eight_slices_of_one_gib_leave_every_card_almost_free() -> None:
    snap = ClusterSnapshot([node("n0", gpus=8)])
    d = place(snap, slices(1, 8))
    assert sorted(d.cards) == list(range(8))
    assert d.mem_bytes == (GiB,) * 8
    # every card still takes a big slice: nothing was taken whole
    assert (snap.gmem_total[0] - snap.gmem_free[0] == GiB).all()
    big = Planner("binpack").plan(snap, slices(60, 1, "big"))
    assert isinstance(big, Decision)


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd", "gpupool", "best-fit"])
def test_a_share_on_each_of_two_cards_takes_half_of_each(policy: str) -> None:
    snap = ClusterSnapshot([node("n0", gpus=4)])
    req = Request("half", cpu_milli=1000, gpu_count=2, gpu_milli=500)
    assert req.is_share and not req.whole_cards
    d = place(snap, req, policy, TargetWorkload.from_requests([req, slices(8, 1)]))
    assert len(set(d.cards)) == 2
    assert d.compute_milli == (500, 500)
    assert d.mem_bytes == (int(snap.gmem_total[0, 0]) // 2,) * 2
    assert sorted(int(x) for x in snap.share_free[0]) == [500, 500, 1000, 1000]


def test_whole_cards_only_when_asked() -> None:
    assert Request("w", gpu_count=2).whole_cards
    assert Request("w", gpu_count=2, gpu_milli=1000).whole_cards
    assert not Request("s", gpu_count=2, gpu_memory_bytes=GiB).whole_cards
    assert Request("s", gpu_count=3, gpu_milli=250).gpu_request_milli == 750


def test_the_slices_go_to_the_best_fitting_cards() -> None:
    snap = ClusterSnapshot([node("n0", gpus=4)])
    occupy(snap, "n0", 1, 60)
    occupy(snap, "n0", 3, 50)
    d = place(snap, slices(10, 2))
    assert set(d.cards) == {1, 3}  # the fullest cards that still take 10 GiB


def test_slices_prefer_one_nvlink_domain_then_one_numa_node() -> None:
    gpus = tuple(
        Gpu(index=i, model="H800", uuid=f"u{i}", numa_node=i // 4, nvlink_domain=i // 2)
        for i in range(8)
    )
    snap = ClusterSnapshot([Node("nv", 128_000, 1 << 20, gpus)])
    occupy(snap, "nv", 0, 70)  # card 0 cannot take 20 GiB: domain 0 has one card left
    pair = Planner("binpack").plan(snap, slices(20, 2))
    assert isinstance(pair, Decision) and sorted(pair.cards) in ([2, 3], [4, 5], [6, 7])
    snap.assume(pair)
    quad = Planner("binpack").plan(snap, slices(20, 4))
    assert isinstance(quad, Decision)
    numa = {i // 4 for i in quad.cards}
    assert len(numa) == 1 and len(set(quad.cards)) == 4


def test_too_few_cards_with_room_is_named() -> None:
    snap = ClusterSnapshot([node("n0", gpus=4)])
    for card in (0, 1):
        occupy(snap, "n0", card, 75)
    req = slices(10, 3)
    feas = feasibility(snap, req)
    assert Reason(int(feas.reason[0])) is Reason.GPU_MEMORY
    assert explain(snap, req, feas, 0) == "needs 10Gi free on each of 3 cards; 2 have it"
    assert isinstance(Planner("binpack").plan(snap, slices(10, 2)), Decision)


def test_compute_on_each_card_counts() -> None:
    snap = ClusterSnapshot([node("n0", gpus=2)])
    place(snap, slices(1, 2, "a", compute=60))
    req = slices(1, 2, "b", compute=50)
    feas = feasibility(snap, req)
    assert Reason(int(feas.reason[0])) is Reason.GPU_COMPUTE
    assert "50% compute free on each of 2 cards; 0 have both" in explain(snap, req, feas, 0)


def test_share_count_per_card_counts() -> None:
    gpus = tuple(Gpu(index=i, model="A100-80GB", uuid=f"u{i}", shares=1) for i in range(2))
    snap = ClusterSnapshot([Node("s", 64_000, 1 << 20, gpus)])
    place(snap, slices(1, 1, "one"))
    req = slices(1, 2)
    feas = feasibility(snap, req)
    assert Reason(int(feas.reason[0])) is Reason.SHARES
    assert "needs 2 cards with room and a free share" in explain(snap, req, feas, 0)


def test_what_if_counts_cards_for_several_slices() -> None:
    snap = ClusterSnapshot([node("n0", gpus=2)])
    a = place(snap, slices(70, 1, "a"))
    req = slices(20, 2)
    assert not room_bound(snap, 0, req, [])
    assert room_bound(snap, 0, req, [a])
    assert fits_without(snap, 0, req, [a])
