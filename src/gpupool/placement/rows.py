"""Per-node reductions over the card grid, fast.

numpy reduces a short last axis slowly: `mask.any(axis=1)` over 5,000 nodes x 8 cards costs
about as much as thirty element-wise operations on the whole grid. A row of 1, 2, 4 or 8 bool
cards is one 8-, 16-, 32- or 64-bit word, so "any card" is "word != 0" and "how many cards" is a
multiply that adds the bytes into the top one (each byte is 0 or 1, the sum at most 8). Other
widths, and arrays that are not contiguous rows, take numpy's own reduction.
"""

from __future__ import annotations

import numpy as np

from gpupool.placement.snapshot import BoolArray, IntArray

_WORD = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_ONES = {1: 0x01, 2: 0x0101, 4: 0x01010101, 8: 0x0101010101010101}


def _words(mask: BoolArray) -> np.ndarray | None:
    if mask.ndim != 2 or mask.dtype != np.bool_ or not mask.flags.c_contiguous:
        return None
    word = _WORD.get(mask.shape[1])
    return None if word is None else mask.view(word)[:, 0]


def row_any(mask: BoolArray) -> BoolArray:
    """`mask.any(axis=1)` for an (N, G) bool array."""
    words = _words(mask)
    if words is None:
        return np.asarray(mask.any(axis=1), dtype=bool)
    return np.asarray(words != 0, dtype=bool)


def row_count(mask: BoolArray) -> IntArray:
    """`mask.sum(axis=1)` for an (N, G) bool array."""
    words = _words(mask)
    g = mask.shape[1] if mask.ndim == 2 else 0
    if words is None:
        return np.asarray(mask.sum(axis=1), dtype=np.int64)
    top = (words.dtype.itemsize - 1) * 8
    ones = words.dtype.type(_ONES[g])
    return np.asarray((words * ones) >> words.dtype.type(top), dtype=np.int64)


def distinct(*columns: np.ndarray) -> tuple[IntArray, IntArray]:
    """The distinct rows across `columns` (each with the rows on its first axis, any shape
    after; floats compared by their bits): `first`, the index of each distinct row's first
    occurrence, and `back`, which maps every row to its distinct row, so that
    `values_of_rows[first][back]` is a value per row."""
    n = len(columns[0])
    parts = [c if c.ndim <= 2 else c.reshape(n, -1) for c in columns if 0 not in c.shape[1:]]
    if not parts or not n:  # nothing tells the rows apart
        return np.zeros(min(n, 1), dtype=np.int64), np.zeros(n, dtype=np.int64)
    # floats by their bits (-0.0 and 0.0 apart is harmless)
    table = np.column_stack([c.view(np.int64) if c.dtype == np.float64 else c for c in parts])
    table = np.ascontiguousarray(table, dtype=np.int64)
    width = table.shape[1]
    keys = table.view(np.dtype((np.void, 8 * width)))[:, 0]
    _, first, back = np.unique(keys, return_index=True, return_inverse=True)
    return np.asarray(first, dtype=np.int64), np.asarray(back.reshape(n), dtype=np.int64)


def kinds(*per_node: np.ndarray) -> IntArray:
    """One id per node (rows of `per_node`), equal for nodes equal in all of them."""
    return distinct(*per_node)[1]
