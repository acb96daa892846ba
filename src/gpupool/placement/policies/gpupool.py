"""gpupool's default policy (work in progress: currently FGD with unrounded scores)."""

from __future__ import annotations

import numpy as np

from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray
from gpupool.placement.policies.fgd import FgdPolicy


class GpupoolPolicy(FgdPolicy):
    name = "gpupool"
    summary = "gpupool default"

    def score(self, ctx: PlanContext) -> FloatArray:
        cache = self.cache(ctx.snap)
        delta = cache.frag_before(ctx.snap, ctx.rows) - cache.frag_after(ctx)
        return np.asarray(delta, dtype=np.float64)
