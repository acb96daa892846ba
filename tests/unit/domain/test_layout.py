"""A slice's logical layout on its card: `lay_out` never lets two live slices share a byte, and it
finds room whenever the card has the free bytes (memory is fungible; the layout is bookkeeping)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.allocations import (
    Extent,
    Slice,
    extents_from_json,
    extents_to_json,
    free_ranges,
    laid_out,
    lay_out,
)


def test_the_lowest_range_long_enough_is_one_extent() -> None:
    assert lay_out([(0, 10), (20, 10)], 10, 100) == ((10, 10),)
    assert lay_out([(0, 10), (10, 10)], 5, 25) == ((20, 5),)
    assert lay_out([], 7, 7) == ((0, 7),)


def test_without_a_range_long_enough_the_free_ranges_are_filled_lowest_first() -> None:
    # free: [10, 20), [30, 40), [50, 100): 15 bytes fit in one, 25 bytes are found in pieces
    taken = [(0, 10), (20, 10), (40, 10)]
    assert lay_out(taken, 15, 55) == ((10, 10), (30, 5))
    assert lay_out(taken, 25, 55) == ((10, 10), (30, 10), (50, 5))
    assert lay_out(taken, 26, 55) is None  # 25 bytes free


def test_free_ranges_tolerate_overlaps_and_ranges_past_the_card() -> None:
    assert free_ranges([(0, 10), (5, 10), (30, 50)], 40) == [(15, 15)]
    assert free_ranges([(50, 10)], 40) == [(0, 40)]


def test_a_slice_keeps_one_range_implicit_and_several_explicit() -> None:
    s = Slice(0, "G0", "A100-80GB", 0, 30, 0)
    one = laid_out(s, [(10, 30)])
    assert (one.offset_bytes, one.extents, one.ranges) == (10, (), ((10, 30),))
    split = laid_out(s, [(10, 20), (50, 10)])
    assert (split.offset_bytes, split.extents) == (10, ((10, 20), (50, 10)))
    with pytest.raises(ValueError, match="add up to 25"):
        laid_out(s, [(10, 20), (50, 5)])
    with pytest.raises(ValueError, match="not after"):
        laid_out(s, [(10, 20), (15, 10)])


def test_extents_json_round_trip_and_absent_extents_are_the_one_range() -> None:
    assert extents_from_json(None, 5, 9) == ()
    assert extents_from_json(extents_to_json([(5, 9)]), 5, 9) == ()
    assert extents_from_json(extents_to_json([(5, 4), (20, 5)]), 5, 9) == ((5, 4), (20, 5))
    for bad, why in [
        ([], "empty"),
        ([{"offsetBytes": 6, "sizeBytes": 9}], "starts at 6"),
        ([{"offsetBytes": 5}], "sizeBytes"),
        ("5:9", "must be a list"),
        ([{"offsetBytes": 5, "sizeBytes": 4}, {"offsetBytes": 20, "sizeBytes": 0}], "size 0"),
    ]:
        with pytest.raises(ValueError, match=why):
            extents_from_json(bad, 5, 9)


CAPACITY = 64


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("reserve"), st.integers(1, CAPACITY)),
            st.tuples(st.just("release"), st.integers(0, 1000)),
        ),
        max_size=60,
    )
)
def test_reserve_and_release_never_overlap_and_fit_iff_the_bytes_are_free(
    steps: list[tuple[str, int]],
) -> None:
    live: list[tuple[Extent, ...]] = []
    for op, n in steps:
        if op == "release":
            if live:
                live.pop(n % len(live))
            continue
        taken = [e for extents in live for e in extents]
        free = CAPACITY - sum(size for _, size in taken)
        got = lay_out(taken, n, CAPACITY)
        assert (got is not None) == (n <= free), (taken, n)
        if got is None:
            continue
        assert sum(size for _, size in got) == n
        assert all(size >= 1 for _, size in got)
        assert all(o >= 0 and o + size <= CAPACITY for o, size in got)
        assert list(got) == sorted(got)
        gaps = free_ranges(taken, CAPACITY)
        assert (len(got) == 1) == any(length >= n for _, length in gaps)
        live.append(got)
        # every byte of the card belongs to at most one live slice
        owned = [0] * CAPACITY
        for extents in live:
            for o, size in extents:
                for b in range(o, o + size):
                    owned[b] += 1
        assert max(owned, default=0) <= 1
