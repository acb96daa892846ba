"""The operators' per-card fragmentation, on hand-computed cards, and how sizes are learnt."""

from __future__ import annotations

import numpy as np
import pytest
from placement_builders import node, occupy, share, slice_gib, whole

from gpupool.domain import GiB, InvalidRequest, Request
from gpupool.placement import ClusterSnapshot
from gpupool.placement.fragmentation import (
    CardSize,
    CommonSizes,
    card_fragmentation,
    in_use_fragmentation,
    pool_fragmentation,
    snapshot_fragmentation,
)

HALF_AND_WHOLE = CommonSizes.learn([share("s", 500), whole("w")])


def test_sizes_are_the_most_frequent_until_the_coverage_is_reached() -> None:
    recent = [share("a", 250)] * 6 + [whole("w")] * 3 + [share("b", 100)]
    sizes = CommonSizes.learn(recent, coverage=0.9)
    assert sizes.sizes == (CardSize(250, 0, 250), CardSize(1000, 0, 1000))
    assert sizes.weights == pytest.approx((6 / 9, 3 / 9))
    everything = CommonSizes.learn(recent, coverage=1.0)
    assert len(everything.sizes) == 3


def test_sizes_of_byte_requests_keep_their_compute_cap_and_cpu_only_requests_are_ignored() -> None:
    sizes = CommonSizes.learn([slice_gib("s", 12, compute=30), Request("c", cpu_milli=1000)])
    assert sizes.sizes == (CardSize(0, 12 * GiB, 300),)


def test_a_bad_coverage_is_a_typed_error() -> None:
    with pytest.raises(InvalidRequest, match=r"coverage must be in \(0, 1\]"):
        CommonSizes.learn([share()], coverage=0)


@pytest.mark.parametrize(
    ("used_gib", "expected"),
    [
        (0, 0.0),  # empty: every size fits, nothing is fragment
        (80, 0.0),  # full: nothing is free
        # 60Gi free of 80Gi: the half-card size fits, the whole card does not: 0.5 * 60/80
        (20, 0.5 * 60 / 80),
        # 30Gi free: neither fits, all of it counts
        (50, 30 / 80),
    ],
)
def test_one_card_by_hand(used_gib: int, expected: float) -> None:
    snap = ClusterSnapshot([node("n", gpus=1)])
    if used_gib:
        occupy(snap, "n", 0, used_gib)
    frag = snapshot_fragmentation(snap, HALF_AND_WHOLE)
    assert frag[0, 0] == pytest.approx(expected)
    assert pool_fragmentation(snap, HALF_AND_WHOLE) == pytest.approx(expected)


def test_no_free_compute_makes_the_free_memory_unusable() -> None:
    free = np.array([40 * GiB])
    total = np.array([80 * GiB])
    known = np.array([True])
    sizes = CommonSizes.learn([slice_gib("s", 10, compute=20)])
    assert card_fragmentation(free, np.array([1000]), total, known, sizes)[0] == 0.0
    assert card_fragmentation(free, np.array([100]), total, known, sizes)[0] == pytest.approx(0.5)


def test_sizes_that_never_fit_a_card_do_not_count_against_it() -> None:
    # A 40Gi slice can never go on a 24Gi card: that is no fragmentation of the card.
    sizes = CommonSizes.learn([slice_gib("big", 40), slice_gib("small", 8)], coverage=1.0)
    snap = ClusterSnapshot([node("n", gpus=1, model="RTX-3090")])
    occupy(snap, "n", 0, 20)  # 4Gi free, below the small size: all of it counts
    assert snapshot_fragmentation(snap, sizes)[0, 0] == pytest.approx(4 / 24, rel=1e-3)
    # On unknown-memory cards byte sizes never apply, so only share sizes measure them.
    g2 = ClusterSnapshot([node("g", gpus=1, model="G2")])
    assert snapshot_fragmentation(g2, sizes)[0, 0] == 0.0


def test_the_pool_figure_is_the_mean_over_healthy_cards() -> None:
    snap = ClusterSnapshot([node("n", gpus=2)])
    occupy(snap, "n", 0, 50)  # 30/80 fragment
    assert pool_fragmentation(snap, HALF_AND_WHOLE) == pytest.approx(30 / 80 / 2)
    # The idle card does not dilute the figure of the cards in use.
    assert in_use_fragmentation(snap, HALF_AND_WHOLE) == pytest.approx(30 / 80)
    snap.set_card_health("n", 1, False)
    assert pool_fragmentation(snap, HALF_AND_WHOLE) == pytest.approx(30 / 80)


def test_without_sizes_nothing_is_fragmented() -> None:
    snap = ClusterSnapshot([node("n", gpus=1)])
    occupy(snap, "n", 0, 50)
    assert pool_fragmentation(snap, CommonSizes.learn([])) == 0.0
