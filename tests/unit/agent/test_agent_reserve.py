"""The share of each card held back from slices."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidNode
from gpupool.domain.reserve import allocatable_bytes, reserved_bytes
from gpupool.domain.units import GiB, MiB


@pytest.mark.parametrize(
    ("total", "pct", "reserved"),
    [
        (80 * GiB, 10, 8 * GiB),  # exact
        (81920 * MiB, 10, 8192 * MiB),
        (15360 * MiB, 10, 1536 * MiB),
        (1000 * MiB + 1, 10, 101 * MiB),  # rounds up to a whole MiB
        (80 * GiB, 0, 0),
        (80 * GiB, 12.5, 10 * GiB),  # fractional percent, exact
        (100 * MiB, 0.5, 1 * MiB),
        (10, 50, 10),  # never more than the card
    ],
)
def test_reserved_bytes(total: int, pct: float, reserved: int) -> None:
    assert reserved_bytes(total, pct) == reserved
    assert allocatable_bytes(total, pct) == total - reserved


def test_default_reserve_is_ten_percent() -> None:
    assert allocatable_bytes(40 * GiB) == 36 * GiB


@pytest.mark.parametrize(("total", "pct"), [(80 * GiB, 100), (80 * GiB, -1), (0, 10), (-5, 10)])
def test_reserve_rejects_impossible_input(total: int, pct: float) -> None:
    with pytest.raises(InvalidNode):
        reserved_bytes(total, pct)
