"""The card tables agree with testing every card against every group, card by card."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.placement.cardtables import CardTables

NEVER = np.iinfo(np.int64).max // 4


def random_needs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Needs (T, N, G) of 5 slice groups (some cards refused, some needs over a whole card, as
    byte slices too big for a card) and whole-card groups of 1, 2 and 4 cards, on nodes of up to
    four cards with a few card kinds; and free shares (N, G)."""
    rng = np.random.default_rng(seed)
    n, g = 300, 4
    kinds = rng.integers(0, 4, (n, g))  # four kinds of card, mixed within nodes
    present = rng.random((n, g)) < 0.85
    slice_need = rng.integers(1, 1100, (5, 4))  # per group and card kind
    slices = np.where(present[None], slice_need[:, kinds], NEVER)
    refuse = rng.random((5, 4)) < 0.2  # a group refuses a card kind (another model)
    slices = np.where(refuse[:, kinds], NEVER, slices)
    whole = np.stack([np.where(present, 1000, NEVER)] * 3)
    need = np.concatenate([slices, whole])
    count = np.array([1, 1, 1, 1, 1, 1, 2, 4])
    share = np.where(present, rng.choice([0, 1000, *rng.integers(0, 1001, 20)], (n, g)), 0)
    return need, count, np.arange(5), share


@pytest.mark.parametrize(("seed", "slice_cards"), [(0, 1), (1, 1), (2, 1), (3, 2), (4, 3)])
def test_card_tables_agree_with_card_by_card_tests(seed: int, slice_cards: int) -> None:
    need, count, slices, share = random_needs(seed)
    count[4] = slice_cards  # a slice group of one card, or a slice on each of several cards
    tables = CardTables(need, count, slices)
    rows = np.arange(len(share))
    fits = share[None] // need  # (T, N, G)
    got = tables.read(rows, share)
    assert (got.tasks == fits.sum(axis=2).T).all()
    assert (got.used == (fits * need).sum(axis=2).T).all()
    assert (got.whole_free == (share == 1000).sum(axis=1)).all()
    partial = ((share[None] >= need) & (share < 1000)[None]).sum(axis=2).T >= 1  # (N, T)
    assert (got.partial == partial).all()
    rest = share[None] - (share[None] // need[slices]) * need[slices]  # (S, N, G)
    hosts = (rest[:, None] >= need[None]).sum(axis=3) >= count[None, :, None]  # (S, T, N)
    after = got.after_slices
    assert after.shape == (len(share), len(slices), len(count))
    assert (after == hosts.transpose(2, 0, 1)).all()
    assert after[..., 6:].any() and not after[..., 6:].all()  # the multi-card groups are tested
    if slice_cards > 1:  # one more slice of group 4 needs that many cards, not one
        one_card = (rest[:, None, 4] >= need[None, 4]).sum(axis=2) >= 1  # (S, N)
        assert (after[..., 4] != one_card.T).any()
    sub = rows[::7]  # any subset of nodes, in any order
    assert (tables.read(sub[::-1], share[sub[::-1]]).after_slices == after[sub[::-1]]).all()
