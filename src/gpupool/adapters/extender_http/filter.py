"""/filter over the cache's snapshot: which of kube-scheduler's nodes take the pod, and for every
other node the specific reason (failed: may change as pods come and go; unresolvable: will not,
e.g. a wrong GPU model, an unknown node, a room hold for another pod).

Every call also tells a tally (the server's `gpupool_extender_refusals_total`) how many nodes it
refused per reason: one call per distinct reason, never one per node.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.room_hold import held_against
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderFilterResult
from gpupool.placement.filters import UNRESOLVABLE, Reason, explain
from gpupool.state.cluster import ClusterCache

Tally = Callable[[str, int], None]  # (reason label, nodes refused for it in one call)
ROOM_HELD = "RoomHeld"  # the node's room is held for another pod (room_hold)


def reason_label(reason: Reason) -> str:
    """The refusal label of a placement reason: `GPU_MEMORY` -> `GpuMemory`."""
    return "".join(word.capitalize() for word in reason.name.split("_"))


REASON_LABELS = tuple(reason_label(r) for r in Reason if r != Reason.FITS)


def _no_tally(reason: str, nodes: int) -> None:
    pass


def _tally_codes(tally: Tally, codes: np.ndarray) -> None:
    """Tell `tally` the refused nodes per placement reason (`codes` >= 0, none FITS)."""
    if codes.size:
        counts = np.bincount(codes)
        for code in np.flatnonzero(counts).tolist():
            tally(reason_label(Reason(code)), int(counts[code]))


def held_nodes(cache: ClusterCache, pod: ScheduledPod, now: float) -> dict[str, str]:
    """Nodes room is being made on for some other pod (`room_hold`), with the refusal."""
    if not cache.room_holds:
        return {}
    return held_against(cache.room_holds.values(), pod.uid, now, cache.placed)


def filter_nodes(
    plans: PlanMemo,
    pod: ScheduledPod,
    names: tuple[str, ...],
    now: float,
    gang_node: str | None = None,
    tally: Tally = _no_tally,
) -> ExtenderFilterResult:
    """`gang_node`: the node whose room is held for this member of a gang (`gang_bind`): the
    only one offered (its held room would count against it in the plan; bind gives it back).
    `tally`: told the refused nodes per reason (a pod-level refusal's `Why` for every node)."""
    cache = plans.cache
    plan = plans.plan(pod)
    if isinstance(plan, Refusal):  # the pod itself is wrong: say why on every node
        why = plan.message
        if names:
            tally(plan.why.value, len(names))
        return ExtenderFilterResult(
            node_names=None, failed_and_unresolvable={n: why for n in names}
        )
    if gang_node is not None and gang_node in names:
        mine = f"room for this pod is held on node {gang_node}, with its gang"
        if len(names) > 1:
            tally(Why.GANG_HELD.value, len(names) - 1)
        return ExtenderFilterResult(
            node_names=(gang_node,),
            failed_nodes={n: f"node {n}: {mine}" for n in names if n != gang_node},
        )
    snap = cache.snapshot()
    rows = plans.rows(snap, names)
    known = rows >= 0
    codes = np.where(known, plan.feas.reason[np.where(known, rows, 0)], -1)
    fits = codes == Reason.FITS
    passing = list(itertools.compress(names, fits.tolist()))
    refused = codes[~fits]
    unknown = int(np.count_nonzero(refused < 0))
    if unknown:
        tally(Why.UNKNOWN_NODE.value, unknown)
    _tally_codes(tally, refused[refused >= 0])
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for k in np.flatnonzero(~fits).tolist():
        name, i, code = names[k], int(rows[k]), int(codes[k])
        if code < 0:
            unresolvable[name] = cache.why_unknown(name)
        elif Reason(code) in UNRESOLVABLE:
            unresolvable[name] = explain(snap, plan.request, plan.feas, i)
        else:
            failed[name] = explain(snap, plan.request, plan.feas, i)
    if passing:
        held = held_nodes(cache, pod, now)
        if held:
            kept = [n for n in passing if n not in held]
            unresolvable.update((n, held[n]) for n in passing if n in held)
            if len(kept) < len(passing):
                tally(ROOM_HELD, len(passing) - len(kept))
            passing = kept
    return ExtenderFilterResult(
        node_names=tuple(passing) if passing else None,
        failed_nodes=failed,
        failed_and_unresolvable=unresolvable,
    )
