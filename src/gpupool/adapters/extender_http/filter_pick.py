"""/filter answers the planner's pick alone where kube-scheduler's scoring could not move the
pod off it anyway.

kube-scheduler skips its whole scoring phase when its filters and the extenders' leave one node
(`schedulePod`: "When only one node after predicate, just use it"): its score plugins over every
node, the extender's `/prioritize` and the second entry's `/prioritize-cpu`. With the shipped
configuration the planner's pick leads every other node by at least 250 points (prioritize.py),
more than kube-scheduler's resource-spreading scores can differ, so for most GPU pods that phase
only confirms the pick: two of a GPU pod's four HTTP calls, and kube-scheduler's scoring of every
node, spent for nothing (docs/extender.md measures the difference).

The scoring is kept where it can change the answer: a pod with soft preferences of its own
(preferred node or pod (anti-)affinity, a `ScheduleAnyway` topology spread: up to 200 points per
term) or a node among those that fit with a PreferNoSchedule taint the pod does not tolerate (up to
300 points). Then /filter answers every node that fits, and /prioritize scores them as before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.prioritize import score_array
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderFilterResult


def scoring_matters(plans: PlanMemo, pod: ScheduledPod, fitting: tuple[str, ...]) -> bool:
    """Whether kube-scheduler's own scores could move `pod` off the planner's pick among
    `fitting`: its soft preferences, or a fitting node whose PreferNoSchedule taint it does not
    tolerate."""
    constraints = pod.view.constraints
    if constraints.preferences:
        return True
    cache = plans.cache
    tainted = cache.prefer_no_schedule.intersection(fitting)
    return any(constraints.avoids(cache.nodes[name]) for name in tainted)


def pick_alone(
    plans: PlanMemo,
    pod: ScheduledPod,
    result: ExtenderFilterResult,
    on_scores: Callable[[np.ndarray], None],
) -> ExtenderFilterResult:
    """`result` with only the planner's pick among its nodes (the one /prioritize gives 10),
    when there is more than one and `scoring_matters` says no; `on_scores` gets the scores that
    chose it (what /prioritize would have answered). Every other result as it is."""
    fitting = result.node_names
    if fitting is None or len(fitting) < 2 or not pod.request.wants_gpu:
        return result
    if scoring_matters(plans, pod, fitting):
        return result
    scores = score_array(plans, pod, fitting)
    on_scores(scores)
    return ExtenderFilterResult(
        node_names=(fitting[int(np.argmax(scores))],),
        failed_nodes=result.failed_nodes,
        failed_and_unresolvable=result.failed_and_unresolvable,
    )
