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

from dataclasses import dataclass

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.rows import distinct
from gpupool.placement.snapshot import BoolArray, IntArray

SHARES = np.arange(MILLI + 1)  # every free share a card can have


def card_kinds(need: IntArray) -> tuple[IntArray, IntArray]:
    """For `need` (T, N, G), each group's per-card need: the kind of each card (N, G), cards
    of one kind needing the same of every group, and the needs of each kind (K, T)."""
    groups, n, g = need.shape
    per_card = need.transpose(1, 2, 0).reshape(n * g, groups)
    first, kind = distinct(per_card)
    return kind.reshape(n, g), per_card[first]


@dataclass(frozen=True, slots=True)
class NodeCards:
    """What the tables say of a batch of nodes (B) for the task groups (T), slice groups (S)."""

    tasks: IntArray  # (B, T) tasks that fit the cards card by card (before a multi-card count)
    used: IntArray  # (B, T) the share those tasks use
    whole_free: IntArray  # (B,) wholly free cards
    partial: BoolArray  # (B, T) whether a partial card (below a whole one) hosts one task
    # (B, S, T) whether what a stream of each slice group leaves on the cards (each card's
    # remainder below one more slice) has the cards for one task of each group
    after_slices: BoolArray


class CardTables:
    def __init__(self, need: IntArray, count: IntArray, slices: IntArray) -> None:
        """`need` (T, N, G): each group's per-card need, huge where it cannot go; `count` (T,):
        the cards one task of each group takes; `slices`: the groups that take a slice of each
        of their cards (a stream of one leaves on every card the remainder below one more
        slice, whether a task takes one card or several)."""
        groups = self.groups = len(need)
        self.slices = len(slices)
        kind, needs = card_kinds(need)
        # a card's row in the tables: its kind's block of 1001 free shares, plus its share
        self._base = kind * (MILLI + 1)
        shares = SHARES[None, :, None]
        # per card, the tasks of each group it holds, the share they use, and whether it is
        # wholly free: (K x 1001, 2T + 1), in int16 (at most 1000 each) so that the table stays
        # in cache; the sums over a node's cards are taken in int64 (numpy's default)
        per_card = shares // needs[:, None, :]  # (K, 1001, T)
        whole = np.broadcast_to((SHARES == MILLI)[None, :, None], (*per_card.shape[:2], 1))
        ints = np.concatenate([per_card, per_card * needs[:, None, :], whole], axis=-1)
        self._ints = ints.astype(np.int16).reshape(len(needs) * (MILLI + 1), 2 * groups + 1)
        # as bits, OR-ed over a node's cards: whether a partial card hosts one task of each
        # group (T bits), and whether what each slice group's stream leaves on the card does
        # (S x T bits)
        partial = (shares >= needs[:, None, :]) & (SHARES < MILLI)[None, :, None]
        need_s = needs[:, None, slices]
        rest = shares - (shares // need_s) * need_s  # (K, 1001, S)
        hosts = rest[..., None] >= needs[:, None, None, :]  # (K, 1001, S, T)
        rows = len(needs) * (MILLI + 1)
        flat = np.concatenate(
            [partial, hosts.reshape(*partial.shape[:2], len(slices) * groups)], -1
        )
        self._bits = np.packbits(flat, axis=-1, bitorder="little").reshape(
            rows, (flat.shape[-1] + 7) // 8
        )
        self._nbits = flat.shape[-1]
        # groups of several cards need a count of the cards, not an OR (none in most workloads)
        self._multi = np.flatnonzero(count > 1)
        self._multi_count = count[self._multi]
        self._multi_hosts = (
            hosts[..., self._multi].astype(np.uint8).reshape(rows, len(slices), len(self._multi))
        )

    def read(self, rows: IntArray, share_free: IntArray) -> NodeCards:
        """The nodes `rows` with `share_free` (B, G) free on their cards: 0 to 1000 each, as a
        snapshot keeps them (a card's free share is at most the whole card, never below 0)."""
        at = self._base[rows] + share_free  # (B, G) rows of the tables
        ints = self._ints[at].sum(axis=1)
        t, s, b = self.groups, self.slices, len(rows)
        bits = np.unpackbits(
            np.bitwise_or.reduce(self._bits[at], axis=1),
            axis=-1,
            count=self._nbits,
            bitorder="little",
        ).view(bool)
        after = bits[:, t:].reshape(b, s, t)
        if len(self._multi):
            after[:, :, self._multi] = self._multi_hosts[at].sum(axis=1) >= self._multi_count
        return NodeCards(ints[:, :t], ints[:, t : 2 * t], ints[:, 2 * t], bits[:, :t], after)
