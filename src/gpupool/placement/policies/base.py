"""The scorer interface. A policy scores feasible nodes; higher is better; ties go to rank order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from gpupool.placement.context import PlanContext
from gpupool.placement.snapshot import IntArray

FloatArray = npt.NDArray[np.float64]


class Policy(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    # The width of the policy's score range (0..100 points for most): soft model preferences
    # move a score by a fixed fraction of it (`preference.py`).
    scale: ClassVar[float] = 100.0

    @abstractmethod
    def score(self, ctx: PlanContext) -> FloatArray:
        """One score per candidate row of `ctx` (same order)."""

    def slice_card(self, ctx: PlanContext, fitting: IntArray) -> int | None:
        """The card for a slice on the chosen node, among `fitting` slots; None: best fit."""
        return None


def gpu_free_total(share: npt.NDArray[np.int64]) -> FloatArray:
    return np.asarray(share.sum(axis=1), dtype=np.float64)
