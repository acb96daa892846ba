"""kube-scheduler alone on the DRA path: its node points and the first device that fits."""

from __future__ import annotations

import numpy as np
from placement_builders import node, occupy, share

from gpupool.domain import Gpu, Node
from gpupool.placement import ClusterSnapshot, Decision, Planner
from gpupool.placement.policies.first_fit import (
    FirstFitByDevicePolicy,
    balanced_allocation,
    least_allocated,
)


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_least_allocated_points_are_integer_and_zero_when_over() -> None:
    assert least_allocated(ints(3, 0, 11, 5), ints(10, 10, 10, 0)).tolist() == [70, 100, 0, 0]
    assert least_allocated(ints(1), ints(3)).tolist() == [66]  # truncated, as in Go


def test_balanced_allocation_is_one_minus_half_the_difference() -> None:
    assert balanced_allocation(ints(5), ints(10), ints(1), ints(10)).tolist() == [80]
    assert balanced_allocation(ints(20), ints(10), ints(0), ints(10)).tolist() == [50]  # capped


def test_it_takes_the_first_device_that_fits_not_the_best_fitting() -> None:
    snap = ClusterSnapshot([node("n0", gpus=3, model="A100-80GB")])
    occupy(snap, "n0", 0, 60)  # card 0: 20 GiB free, too little for half a card
    occupy(snap, "n0", 2, 32)  # card 2: 48 GiB free, the best fit for half a card
    first = Planner(FirstFitByDevicePolicy()).plan(snap, share(milli=500))
    best = Planner("best-fit").plan(snap, share(milli=500))
    assert isinstance(first, Decision) and isinstance(best, Decision)
    assert first.cards == (1,)
    assert best.cards == (2,)


def test_devices_come_in_the_slice_order_of_their_index() -> None:
    # slot 0 holds the card of index 1: the slice lists gpu-0 (slot 1) first
    gpus = (Gpu(1, "A100-80GB", uuid="b"), Gpu(0, "A100-80GB", uuid="a"))
    snap = ClusterSnapshot([Node("n", 64_000, 1 << 19, gpus)])
    d = Planner(FirstFitByDevicePolicy()).plan(snap, share(milli=300))
    assert isinstance(d, Decision) and d.cards == (1,)


def test_the_node_is_the_least_allocated_in_cpu_and_memory_whatever_its_cards() -> None:
    snap = ClusterSnapshot([node("busy", gpus=8), node("idle", gpus=1)])
    snap.cpu_free[0] -= 32_000  # half of busy's CPU is taken; its eight cards are all free
    d = Planner(FirstFitByDevicePolicy()).plan(snap, share(milli=500))
    assert isinstance(d, Decision) and d.node == "idle"


def test_ties_go_to_a_node_drawn_at_random() -> None:
    picked = set()
    for seed in range(12):
        snap = ClusterSnapshot([node("a"), node("b")])
        d = Planner(FirstFitByDevicePolicy(seed), rank=[0, 1]).plan(snap, share(milli=500))
        assert isinstance(d, Decision)
        picked.add(d.node)
    assert picked == {"a", "b"}
