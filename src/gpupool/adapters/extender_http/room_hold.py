"""Room held by reclaim for the pod it was made for (pure).

When the controller evicts a borrowed pod to make room on node X for a waiting pod P (reclaim
for room), it records on the victim's GpuLease `status.reclaim` the node, P (`for`, `forUid`) and
`holdUntil` (the eviction time plus `controllers.reclaim.plan.ROOM_HOLD_S`). The extender watches
GpuLeases, so it sees the hold without watching pods, and filter refuses X to every pod but P
while the hold stands:
- it stands until `holdUntil` (a stuck hold never blocks a node for longer);
- it ends at once when P holds a lease (P was bound, anywhere: a GpuLease is named after its
  pod's uid), and when the controller removes `holdUntil` (P gone, finished, placed or gated
  again; the controller's next round after that);
- P itself is never refused by its own hold; every other pod is, on X only, even one that would
  fit beside P (kept simple).
Everything the rule reads is on the API server, so a restarted extender refuses the same nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpupool.state.lease import RoomHold


def held_reason(hold: RoomHold) -> str:
    """The refusal kube-scheduler reports for a held node."""
    return f"node {hold.node}: room is being made for pod {hold.pod} (reclaim)"


def hold_stands(hold: RoomHold, now: float, placed: Callable[[str], bool]) -> bool:
    """Whether the hold still stands: not past `holdUntil`, and its pod holds no lease yet
    (`placed(lease key)`)."""
    return now < hold.until and not placed(hold.lease_key)


def held_against(
    holds: Iterable[RoomHold], pod_uid: str, now: float, placed: Callable[[str], bool]
) -> dict[str, str]:
    """Node -> refusal for each node held for some pod other than `pod_uid`."""
    out: dict[str, str] = {}
    for hold in holds:
        if hold.uid != pod_uid and hold.node not in out and hold_stands(hold, now, placed):
            out[hold.node] = held_reason(hold)
    return out
