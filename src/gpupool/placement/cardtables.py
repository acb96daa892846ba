"""What a stream of each task group takes from a node's cards and leaves on them, by table lookup.

The capacity measure (capacity.py) asks per node: how many tasks of each group fit its cards and
what share they use; and per slice group s and group t, after as many tasks of s as fit went
onto each card, do enough cards hold one more task of t? Card by card, the second is S x T x G
tests per node, the largest part of the measure's cost. But a card's answers depend only on its
free share (0 to 1000) and on what every group needs on it, and cards alike in those needs (one
model, one memory size) are few: so they are worked out once per (card kind, free share) when
the model is built, and per node they are one lookup per card and a sum, or an OR of bits over
t, over its cards. Groups of several cards need a count over the cards, not an OR; they keep a
count table of their own (empty where the workload has none).
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.snapshot import BoolArray, IntArray

SHARES = np.arange(MILLI + 1)  # every free share a card can have


def card_kinds(need: IntArray) -> tuple[IntArray, IntArray]:
    """For `need` (T, N, G), each group's per-card need: the kind of each card (N, G), cards
    of one kind needing the same of every group, and the needs of each kind (K, T)."""
    groups, n, g = need.shape
    if not groups:  # nothing tells cards apart
        return np.zeros((n, g), dtype=np.int64), np.zeros((1, 0), dtype=np.int64)
    per_card = need.transpose(1, 2, 0).reshape(n * g, groups)
    needs, kind = np.unique(per_card, axis=0, return_inverse=True)
    return kind.reshape(n, g), needs


def _unpack(bits: np.ndarray, count: int) -> BoolArray:
    """The first `count` bits of the last axis (packbits order: little), as bools."""
    return np.unpackbits(bits, axis=-1, count=count, bitorder="little").view(bool)


class CardTables:
    def __init__(self, need: IntArray, count: IntArray, slices: IntArray) -> None:
        """`need` (T, N, G): each group's per-card need, huge where it cannot go; `count` (T,):
        the cards one task of each group takes; `slices`: the groups of one slice per task."""
        if (count[slices] != 1).any():
            raise ValueError("a slice group takes one card per task")
        self.groups = len(need)
        self.card_kind, needs = card_kinds(need)
        # what each slice group's stream leaves on a card of each kind and share: (K, 1001, S)
        need_s = needs[:, None, slices]
        rest = SHARES[None, :, None] - (SHARES[None, :, None] // need_s) * need_s
        hosts = rest[..., None] >= needs[:, None, None, :]  # (K, 1001, S, T)
        self._after_slices = np.packbits(hosts, axis=-1, bitorder="little")
        self._multi = np.flatnonzero(count > 1)
        self._multi_count = count[self._multi]
        self._after_slices_multi = hosts[..., self._multi].astype(np.uint8)
        # a partial card (below a whole one) that hosts one task of each group: (K, 1001, T)
        partial = (SHARES[None, :, None] >= needs[:, None, :]) & (SHARES < MILLI)[:, None]
        self._partial = np.packbits(partial, axis=-1, bitorder="little")
        # per card, the tasks of each group it holds and the share they use: (K, 1001, T, 2)
        per_card = SHARES[None, :, None] // needs[:, None, :]
        # (at most 1000 each: int16 keeps the table small enough to stay in cache; the sums
        # over a node's cards are taken in int64, numpy's default for small integers)
        self._stream = np.stack([per_card, per_card * needs[:, None, :]], axis=-1).astype(np.int16)

    def stream(self, rows: IntArray, share_free: IntArray) -> tuple[IntArray, IntArray]:
        """(B, T) twice: per group, the tasks that fit the node's cards card by card (before a
        multi-card group's count divides them) and the share those tasks use."""
        per_node = self._stream[self.card_kind[rows], share_free].sum(axis=1)  # (B, T, 2)
        return per_node[..., 0], per_node[..., 1]

    def partial(self, rows: IntArray, share_free: IntArray) -> BoolArray:
        """(B, T): whether a partial card of the node hosts one task of each group."""
        bits = self._partial[self.card_kind[rows], share_free]  # (B, G, bytes)
        return _unpack(np.bitwise_or.reduce(bits, axis=1), self.groups)

    def after_slices(self, rows: IntArray, share_free: IntArray) -> BoolArray:
        """(B, S, T): whether what a stream of each slice group leaves on the node's cards (each
        card's remainder below one more slice) has the cards for one task of each group."""
        kind = self.card_kind[rows]
        bits = self._after_slices[kind, share_free]  # (B, G, S, bytes)
        fit = _unpack(np.bitwise_or.reduce(bits, axis=1), self.groups)
        if len(self._multi):
            cards = self._after_slices_multi[kind, share_free].sum(axis=1)  # (B, S, multi)
            fit[:, :, self._multi] = cards >= self._multi_count
        return fit
