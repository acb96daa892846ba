"""/filter answers the planner's pick alone where kube-scheduler's scoring could not move the
pod off it anyway.

kube-scheduler skips its whole scoring phase when its filters and the extenders' leave one node
(`schedulePod`: "When only one node after predicate, just use it"): its score plugins over every
node, the extender's `/prioritize` and the second entry's `/prioritize-cpu`. With the shipped
configuration the planner's pick leads every other node by at least 250 points (prioritize.py),
more than kube-scheduler's resource-spreading scores can differ, so for most GPU pods that phase
only confirms the pick: two of a GPU pod's four HTTP calls, and kube-scheduler's scoring of every
node, spent for nothing (docs/extender.md measures the difference).

The pick is then counted on the cache's snapshot until the pod's bind reserves its lease
(`ClusterCache.assume_pick`), as kube-scheduler assumes a pod before binding it: its next
scheduling cycle, and so the next pod's /filter, comes before this pod's /bind has reserved
anything, and without the pick counted that filter would choose over a view a pod or more behind
(which costs placement: `bench/fill_gap_model.py`'s `extender_now_lagN`). A pick whose bind never
comes (kube-scheduler gave the pod up after /filter) stops counting after `PICK_TTL_S`.

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
from gpupool.adapters.extender_http.refusal import Refusal
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderFilterResult

PICK_TTL_S = 15.0  # a pick whose bind has not come by then stops counting (kube-scheduler's
# bind call times out after 5 s; a pod it gave up is filtered again, which replaces its pick)


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
    now: float,
) -> ExtenderFilterResult:
    """`result` with only the planner's pick among its nodes (the one /prioritize gives 10)
    when `scoring_matters` says no (every other result as it is); `on_scores` gets the scores
    that chose it (what /prioritize would have answered). The pick, or the one node that fits,
    is counted on the snapshot from `now` (`assume_pick`) unless the pod is a gang member."""
    fitting = result.node_names
    if fitting is None or not pod.request.wants_gpu:
        return result
    if len(fitting) == 1:  # kube-scheduler scores nothing either: this is where it binds
        pick = fitting[0]
    elif scoring_matters(plans, pod, fitting):
        return result
    else:
        scores = score_array(plans, pod, fitting)
        on_scores(scores)
        pick = fitting[int(np.argmax(scores))]
    plan = plans.plan(pod)
    # a gang member's room is held already (gang_bind); one pod's pick is counted once
    if pod.view.gang is None and not isinstance(plan, Refusal):
        snap = plans.cache.snapshot()
        i = snap.index[pick]
        decision = plans.planners.of(pod.policy).decide(snap, plan.request, plan.feas, i, 0.0)
        plans.cache.assume_pick(pod.lease_key, decision, now)
    return ExtenderFilterResult(
        node_names=(pick,),
        failed_nodes=result.failed_nodes,
        failed_and_unresolvable=result.failed_and_unresolvable,
    )
