"""When the admission+reclaim loop next has timed work, pure, from its round
(`AdmissionRound`): what it decides that no watched change announces.

- pods queued, or admitted this round (a claim not yet ready keeps its pod gated): `busy_s`
  from now. A queue moves with changes mostly, but also with time (a budget's window, reclaim's
  room holds, a claim allocated), so a loop with a queue keeps its short period;
- a tenant with a budget: `busy_s` from now (its meter runs with the leases' hours, and the
  GpuQuota status shows it);
- a pod with a reclaim or drain notice: the notice's eviction time, and while that is past (an
  eviction refused, 429, or a pod still terminating) `busy_s` from now.

None: nothing timed (an idle cluster): the loop waits for a change, an object set aside, or the
manager's safety net.
"""

from __future__ import annotations

from gpupool.controllers.admission.reconcile import AdmissionRound

BUSY_S = 5.0


def next_admission_work(round_: AdmissionRound, *, busy_s: float = BUSY_S) -> float | None:
    now = round_.now
    if round_.plan.queued or round_.plan.admit or round_.budgets:
        return now + busy_s
    out: float | None = None
    for pod in round_.pods:
        if pod.terminal:
            continue
        for notice in (pod.reclaim_notice, pod.drain_notice):
            if notice is None:
                continue
            at = notice.evict_at if notice.evict_at > now else now + busy_s
            out = at if out is None else min(out, at)
    return out
