"""kube-scheduler alone on the DRA path: its own node scoring, then its DRA allocator's first
device that fits. A yardstick for what gpupool's placement adds there, not a policy to run.

What it models (kube-scheduler 1.34 to 1.36, as its default profile scores a pod without
affinities, spread constraints, tolerations or images, which is what a simulated task is):

- the node: the sum of NodeResourcesFit's LeastAllocated score and NodeResourcesBalancedAllocation's
  score, both over cpu and memory with weight 1, in the scheduler's integer points (0..100 each).
  On the DRA path a GPU is no node resource, so neither score sees the cards; the
  DynamicResources plugin filters (a node whose devices cannot hold the claim is out) but does
  not score. Ties go to a node drawn at random, as the scheduler's selectHost draws among the
  best-scored nodes;
- the card: the allocator walks the node's ResourceSlice devices in their listed order
  (`gpu-<index>`, by card index) and takes the first whose remaining consumable capacity holds
  the claim (`slice_card`). Whole cards come out the same way: the first free cards by index
  (what the planner gives whole-card requests on nodes of one NUMA node and no NVLink, as the
  openb nodes are).

Not modelled: percentageOfNodesToScore (on a cluster of 1213 nodes the scheduler stops looking
after about 40% of the nodes that fit, from a rotating start; here every node that fits is
scored), the non-zero defaults the scheduler scores a pod without a cpu or memory request at
(100m, 200Mi), and the allocator's card order on nodes with several NUMA nodes.
"""

from __future__ import annotations

import numpy as np

from gpupool.placement.context import PlanContext
from gpupool.placement.policies.base import FloatArray, Policy
from gpupool.placement.snapshot import IntArray

MAX_NODE_SCORE = 100  # the scheduler's framework.MaxNodeScore


def least_allocated(requested: IntArray, capacity: IntArray) -> IntArray:
    """NodeResourcesFit's LeastAllocated points for one resource (integer division, as in Go)."""
    cap = np.maximum(capacity, 1)
    points = (capacity - requested) * MAX_NODE_SCORE // cap
    return np.asarray(np.where((capacity <= 0) | (requested > capacity), 0, points), np.int64)


def balanced_allocation(
    cpu_requested: IntArray, cpu_capacity: IntArray, mem_requested: IntArray, mem_capacity: IntArray
) -> IntArray:
    """NodeResourcesBalancedAllocation's points: (1 - the standard deviation of the two used
    fractions, each capped at 1) x 100, truncated; for two resources that deviation is half
    their difference."""
    cpu = np.minimum(cpu_requested / np.maximum(cpu_capacity, 1), 1.0)
    mem = np.minimum(mem_requested / np.maximum(mem_capacity, 1), 1.0)
    std = np.abs(cpu - mem) / 2.0
    return np.asarray(((1.0 - std) * MAX_NODE_SCORE).astype(np.int64), np.int64)


class FirstFitByDevicePolicy(Policy):
    name = "first-fit-by-device"
    summary = "kube-scheduler alone on DRA: least-allocated cpu/memory node, first device that fits"
    scale = 2.0 * MAX_NODE_SCORE  # two plugins' points

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def node_points(self, ctx: PlanContext) -> IntArray:
        """The scheduler's score of each candidate node, with the task on it."""
        snap, rows = ctx.snap, ctx.rows
        cpu_cap, mem_cap = snap.cpu_cap[rows], snap.mem_cap[rows]
        cpu_req = cpu_cap - ctx.cpu_after
        mem_req = mem_cap - ctx.mem_after
        fit = (least_allocated(cpu_req, cpu_cap) + least_allocated(mem_req, mem_cap)) // 2
        return np.asarray(fit + balanced_allocation(cpu_req, cpu_cap, mem_req, mem_cap), np.int64)

    def score(self, ctx: PlanContext) -> FloatArray:
        # a draw below one point breaks ties at random and never reorders different points
        draw = self.rng.random(len(ctx.rows))
        return np.asarray(self.node_points(ctx) + draw, dtype=np.float64)

    def slice_card(self, ctx: PlanContext, fitting: IntArray) -> int | None:
        node = ctx.snap.nodes[int(ctx.rows[0])]
        return int(min(fitting, key=lambda slot: node.gpus[int(slot)].index))
