"""The classic heuristics: random, binpack, spread, best-fit, dot-product, gpu-packing,
gpu-clustering. Integer scores (0..100) where the FGD paper's simulator uses them, because the
truncation creates the ties its results depend on."""

from __future__ import annotations

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.context import PlanContext
from gpupool.placement.policies.base import FloatArray, Policy, gpu_free_total
from gpupool.placement.snapshot import KINDS, IntArray, request_kind

MAX_SPEC_CPU = 128_000.0  # the paper simulator's normalisation constants
MAX_SPEC_GPU = 8_000.0


class RandomPolicy(Policy):
    name = "random"
    summary = "any node that fits, uniformly at random"
    scale = 1.0  # fractions, not points

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def score(self, ctx: PlanContext) -> FloatArray:
        return self.rng.random(len(ctx.rows))

    def slice_card(self, ctx: PlanContext, fitting: IntArray) -> int | None:
        # Random all the way down, as the paper's Random baseline picks the GPU at random too.
        return int(self.rng.choice(fitting))


def _used_fraction_after(ctx: PlanContext) -> FloatArray:
    snap, rows = ctx.snap, ctx.rows
    if ctx.req.wants_gpu:
        cap = np.maximum(snap.gpu_count[rows] * MILLI, 1).astype(np.float64)
        return 1.0 - gpu_free_total(ctx.share_after) / cap
    cap_cpu = np.maximum(snap.cpu_cap[rows], 1).astype(np.float64)
    return 1.0 - ctx.cpu_after / cap_cpu


class BinpackPolicy(Policy):
    name = "binpack"
    summary = "the fullest node that fits (GPU share, then CPU)"
    scale = 1.0  # fractions, not points

    def score(self, ctx: PlanContext) -> FloatArray:
        cpu_used = 1.0 - ctx.cpu_after / np.maximum(ctx.snap.cpu_cap[ctx.rows], 1)
        return _used_fraction_after(ctx) + 1e-3 * cpu_used


class SpreadPolicy(Policy):
    name = "spread"
    summary = "the emptiest node that fits"
    scale = 1.0  # fractions, not points

    def score(self, ctx: PlanContext) -> FloatArray:
        cpu_used = 1.0 - ctx.cpu_after / np.maximum(ctx.snap.cpu_cap[ctx.rows], 1)
        return -(_used_fraction_after(ctx) + 1e-3 * cpu_used)


class BestFitPolicy(Policy):
    name = "best-fit"
    summary = "least leftover CPU and GPU, weighted 0.5/0.5"

    def score(self, ctx: PlanContext) -> FloatArray:
        left_cpu = ctx.cpu_after / MAX_SPEC_CPU
        left_gpu = gpu_free_total(ctx.share_after) / MAX_SPEC_GPU
        return np.floor((1.0 - (0.5 * left_cpu + 0.5 * left_gpu)) * 100.0)


class DotProductPolicy(Policy):
    name = "dot-product"
    summary = "Tetris: smallest dot product of free resources and the request, per node capacity"
    scale = 1.0  # fractions, not points

    def score(self, ctx: PlanContext) -> FloatArray:
        snap, rows, req = ctx.snap, ctx.rows, ctx.req
        cpu_cap = np.maximum(snap.cpu_cap[rows], 1)
        dot = (snap.cpu_free[rows] / cpu_cap) * (req.cpu_milli / cpu_cap)
        if req.wants_gpu:
            b = np.arange(len(rows))[:, None]
            cards = ctx.cards.shape[1]
            chosen_free = snap.share_free[rows][b, ctx.cards].sum(axis=1) / (MILLI * cards)
            dot = dot + chosen_free * (req.gpu_request_milli / (MILLI * cards))
        return np.asarray(-dot, dtype=np.float64)


class GpuPackingPolicy(Policy):
    name = "gpu-packing"
    summary = "partly used GPUs first, then partly used nodes, then idle nodes"

    def score(self, ctx: PlanContext) -> FloatArray:
        snap, rows, req = ctx.snap, ctx.rows, ctx.req
        if not req.wants_gpu:
            return np.zeros(len(rows))
        share = snap.share_free[rows]
        fully_free = (share == MILLI).sum(axis=1)
        idle_node = fully_free == snap.gpu_count[rows]
        b = np.arange(len(rows))[:, None]
        chosen = share[b, ctx.cards]
        uses_free = (chosen == MILLI).sum(axis=1)
        on_used = (chosen * 100 // MILLI).sum(axis=1)
        case1 = np.maximum(100 - on_used // 10, 50)
        case2 = np.maximum(50 - uses_free, 33)
        case3 = np.maximum(33 - fully_free, fully_free)
        packed = np.where(idle_node, case3, np.where(uses_free > 0, case2, case1))
        return np.asarray(packed, dtype=np.float64)


class GpuClusteringPolicy(Policy):
    name = "gpu-clustering"
    summary = "nodes already running requests of the same kind"

    def score(self, ctx: PlanContext) -> FloatArray:
        snap, rows, req = ctx.snap, ctx.rows, ctx.req
        if not req.wants_gpu:
            return np.zeros(len(rows))
        kinds = snap.kind_count[rows][:, 1:KINDS] > 0  # GPU kinds present on each node
        mine = kinds[:, request_kind(req) - 1]
        distinct = kinds.sum(axis=1)
        used = 25 * (MAX_SPEC_GPU - gpu_free_total(snap.share_free[rows])) // MAX_SPEC_GPU
        band = np.where(mine, np.where(distinct == 1, 75, 50), np.where(distinct == 0, 25, 0))
        return used + band
