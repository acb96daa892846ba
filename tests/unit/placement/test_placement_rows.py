"""The per-node reductions agree with numpy's for every card count and density; node kinds and
distinct rows find exactly the equal ones."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.placement.rows import distinct, kinds, row_any, row_count


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


def test_kinds_are_equal_exactly_for_nodes_equal_in_every_array() -> None:
    rng = np.random.default_rng(3)
    grid = rng.integers(0, 2, (200, 2, 3))  # few values: many nodes repeat
    ratio = rng.choice([0.5, 0.25], 200)
    ids = kinds(grid, ratio)
    for a in range(0, 200, 7):
        for b in range(200):
            same = bool((grid[a] == grid[b]).all() and ratio[a] == ratio[b])
            assert (ids[a] == ids[b]) == same, (a, b)
    assert kinds(np.zeros((3, 0))).tolist() == [0, 0, 0]  # nothing to tell them apart


def test_distinct_rows_rebuild_every_row_and_point_at_first_occurrences() -> None:
    rng = np.random.default_rng(4)
    kind = rng.integers(0, 3, 300)
    cpu = rng.integers(0, 3, 300) * 1000
    share = rng.integers(0, 2, (300, 4)) * 500
    first, back = distinct(kind, cpu, share)
    table = np.column_stack([kind, cpu, share])
    assert (table[first][back] == table).all()
    assert len(np.unique(table, axis=0)) == len(first)
    for k, row in enumerate(first):  # no earlier row equals the one kept
        assert not (table[:row] == table[row]).all(axis=1).any(), k
