"""The per-node reductions agree with numpy's for every card count and density."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.placement.rows import row_any, row_count


@pytest.mark.parametrize("cards", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("density", [0.0, 0.3, 0.9, 1.0])
def test_row_any_and_count_agree_with_numpy(cards: int, density: float) -> None:
    mask = np.random.default_rng(cards).random((257, cards)) < density
    assert (row_any(mask) == mask.any(axis=1)).all()
    assert (row_count(mask) == mask.sum(axis=1)).all()
    wide = np.random.default_rng(1).random((257, cards + 3)) < density
    part = wide[:, :cards]  # not contiguous rows: numpy's own reduction
    assert (row_any(part) == part.any(axis=1)).all()
    assert (row_count(part) == part.sum(axis=1)).all()
