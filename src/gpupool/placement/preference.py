"""Soft model preferences: `prefer-gpu-model` raises a node's score, `avoid-gpu-model` lowers it.

A preference never filters: every node the filters pass stays a candidate, so a pod that avoids
T4 still lands on a T4 when nothing else fits. It moves the policy's score by a fixed share of
the policy's score range (`Policy.scale`: 100 points for gpupool, FGD, best-fit, gpu-packing and
gpu-clustering; 1.0 for binpack, spread, dot-product and random, which score in fractions):

- a node whose cards for the pod are of a preferred model gains PREFER_SHARE (half) of it:
  +50 points under gpupool's default policy;
- a node whose cards for the pod are of an avoided model loses AVOID_SHARE (half) of it;
- a node that would give the pod cards of several models moves in proportion to its cards of
  each kind.

So a preferred node wins unless the policy ranks another more than half its range above it, and
prefer A with avoid B puts A a whole range above B. A request without preferences gets its
policy's scores untouched (the same array), so the fill experiment's numbers do not move.
"""

from __future__ import annotations

import numpy as np

from gpupool.placement.context import PlanContext
from gpupool.placement.policies.base import FloatArray

PREFER_SHARE = 0.5  # of the policy's score range
AVOID_SHARE = 0.5


def fraction_of(ctx: PlanContext, models: tuple[str, ...]) -> FloatArray:
    """Per candidate, the fraction of the cards the pod would take there that are of `models`."""
    ids = [ctx.snap.model_ids[m] for m in models if m in ctx.snap.model_ids]
    cards = ctx.cards
    if not ids or cards.shape[1] == 0:
        return np.zeros(len(ctx.rows))
    taken = ctx.snap.model_id[ctx.rows[:, None], cards]
    return np.asarray(np.isin(taken, ids).mean(axis=1), dtype=np.float64)


def with_preferences(ctx: PlanContext, scores: FloatArray, scale: float) -> FloatArray:
    """The candidates' `scores` (on a range `scale` wide) with the request's model preferences
    applied; the same array when it has none."""
    req = ctx.req
    if not (req.preferred_models or req.avoided_models) or len(scores) == 0:
        return scores
    shift = PREFER_SHARE * fraction_of(ctx, req.preferred_models) - AVOID_SHARE * fraction_of(
        ctx, req.avoided_models
    )
    return np.asarray(scores, dtype=np.float64) + scale * shift
